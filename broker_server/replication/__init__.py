"""Replication and high availability: a broker's place in its group, the master's and the
slave's sides of the HA stream, and controller mode (the controller and the broker's term)."""
