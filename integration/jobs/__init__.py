"""Jobs that run on twophase end to end; the flights job is the main one."""
