"""One module per actor role: thin pykka actors joining protocols + mgrpo_actors logic + the bus.

Dependencies point one way (docs/architecture.md §Layout): actors -> mgrpo_actors -> protocols.
"""
