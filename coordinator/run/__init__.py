"""A run of a job: epochs, restore and recovery, endings and restarts, lingering cleanup, the runtime."""
