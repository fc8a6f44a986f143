"""Wire views of the Tinker JSON protocol."""
