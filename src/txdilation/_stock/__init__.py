"""Stock magic-wormhole's module names, ``wormhole._dilation.<name>``, served by txdilation.

``txdilation.install()`` maps ``wormhole._dilation`` onto this package and each
``wormhole._dilation.<name>`` onto ``txdilation._stock.<name>``. Each module here re-exports the
txdilation classes and names stock code, applications (fowl) and magic-wormhole's own tests
import from that module of stock's, plus the few hooks they patch or reach
(:mod:`txdilation._stock.manager`), and nothing else: no protocol logic lives here.
"""
