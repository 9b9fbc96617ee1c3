"""Who polls a store and cluster: :mod:`.lock`, the lock whose holder is the one poller, and :mod:`.readers`,
the marks of the viewers that read its rounds."""
