"""Identity and access management: ARNs, the action catalogue, policy documents and evaluation."""
