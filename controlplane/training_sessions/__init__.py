"""Sessions, their training models and samplers, and the ordered operations they run."""
