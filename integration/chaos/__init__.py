"""The chaos suite: the flights job crashed at every fault point and by kill -9, restarted, verified."""
