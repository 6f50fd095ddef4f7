"""One module per actor role: thin pykka actors joining protocols + mgrpo_actors logic + the bus.

Dependencies point one way (design.md §Layout): actors -> mgrpo_actors -> protocols.
"""
