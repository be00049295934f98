"""Offsets and membership: consumer offsets and their changes, consumer groups and their
membership watch, ordered-consumption queue locks, and which account owns a client id."""
