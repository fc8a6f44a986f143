"""The model package registry: every saved checkpoint is a versioned model package in a group."""
