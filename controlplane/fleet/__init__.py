"""The GPU workers: what each serves, how full it is, whether it is alive."""
