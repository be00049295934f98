"""Security of the broker and the name server: ACLs and their reloading, request signing and
admission, the caller's account, cluster authentication between members, and TLS."""
