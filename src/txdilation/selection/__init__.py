"""L3: one generation's race of hints (the Connector), the hints themselves, each attempt's
outcome, and the selected link while it carries records (dispatch, liveness, RTT).
"""
