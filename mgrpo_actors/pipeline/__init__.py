"""The pieces that connect the agents' pure logic to the bus (the NATS pipeline grows here)."""
