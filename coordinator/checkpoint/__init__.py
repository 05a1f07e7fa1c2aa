"""The checkpoint coordinator: trigger, acknowledge, complete and notify, with the completed
checkpoints, the committed marker and the driver fence."""
