"""The committer: commits a checkpoint's pending transactions (in lanes, by policy) and ages them."""
