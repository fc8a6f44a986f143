"""Identity and access management: who is calling (API-key and login authentication, principals),
what they may do (ARNs, the action catalogue, policy documents and evaluation, each decision
audited), and the operator commands that provision accounts."""
