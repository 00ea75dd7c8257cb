"""Putting an application you already run on txdilation, without changing it (docs/dropin.md).

Layer: application (beside ``cli``). ``txdilation exec`` (:mod:`.exec_command`) runs a command
with :mod:`.startup` armed in every Python process under it; ``txdilation enable`` /
``disable`` (:mod:`.switch`) arm it in every process of one environment; ``txdilation which``
(:mod:`.which`) says which Dilation this environment runs. :mod:`.proof` is the JSON line each
process can write about itself. Nothing here imports Twisted or ``wormhole`` until a process
actually imports ``wormhole``.
"""
