"""The policy each membership role grants; a member's inline policies are evaluated with it
(so an inline Deny can narrow even an owner)."""

from __future__ import annotations

from functools import cache

from .policy import PolicyDocument

_OWN_USER = "arn:loopwright:iam::${loopwright:PrincipalAccount}:user/${loopwright:username}"

DOCUMENTS: dict[str, dict] = {
    "owner": {
        "Version": "2012-10-17",
        "Statement": [{"Sid": "Everything", "Effect": "Allow", "Action": "*", "Resource": "*"}],
    },
    "admin": {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "Everything", "Effect": "Allow", "Action": "*", "Resource": "*"},
            {
                "Sid": "NotBillingSetup",
                "Effect": "Deny",
                "Action": "billing:ManageBilling",
                "Resource": "*",
            },
        ],
    },
    "member": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Train",
                "Effect": "Allow",
                "Action": ["sessions:*", "registry:*"],
                "Resource": "*",
            },
            {
                "Sid": "UseKeys",
                "Effect": "Allow",
                "Action": [
                    "kms:DescribeKey",
                    "kms:ListKeys",
                    "kms:Encrypt",
                    "kms:Decrypt",
                    "kms:GenerateDataKey",
                ],
                "Resource": "*",
            },
            {
                "Sid": "UseRoles",
                "Effect": "Allow",
                "Action": ["iam:GetRole", "iam:ListRoles", "iam:PassRole", "iam:ListUsers"],
                "Resource": "*",
            },
            {
                "Sid": "OwnKeys",
                "Effect": "Allow",
                "Action": [
                    "iam:CreateApiKey",
                    "iam:ListApiKeys",
                    "iam:CreateAccessKey",
                    "iam:ListAccessKeys",
                ],
                "Resource": _OWN_USER,
            },
            {
                "Sid": "RevokeOwnKeys",
                "Effect": "Allow",
                "Action": ["iam:RevokeApiKey", "iam:RevokeAccessKey"],
                "Resource": "*",
                "Condition": {"StringEquals": {"iam:ApiKeyOwner": "${loopwright:PrincipalArn}"}},
            },
        ],
    },
    "billing_viewer": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadBilling",
                "Effect": "Allow",
                "Action": [
                    "billing:GetUsageReport",
                    "billing:GetInvoices",
                    "billing:ListBudgets",
                    "billing:DescribeBudget",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ReadSessions",
                "Effect": "Allow",
                "Action": [
                    "sessions:List*",
                    "sessions:Describe*",
                    "registry:List*",
                    "registry:Describe*",
                ],
                "Resource": "*",
            },
        ],
    },
}


@cache
def membership_policy(role: str) -> PolicyDocument:
    return PolicyDocument.parse(DOCUMENTS[role])
