"""Forms of the account pages. Fields only parse what people type; the control plane's services
(sign up, login check) decide what is valid, and their errors land on the field they name."""

from __future__ import annotations

from django import forms

from controlplane.audit.outcomes import note_failure
from controlplane.errors import DomainError


class PlainForm(forms.Form):
    """Labels without a colon: they read as headings of their fields."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class SignupForm(PlainForm):
    email = forms.CharField(
        label="Email", max_length=254, widget=forms.EmailInput(attrs={"autocomplete": "email"})
    )
    password = forms.CharField(
        label="Password",
        strip=False,
        help_text="At least 10 characters, not a common password and not only digits.",
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    tenant_name = forms.CharField(
        label="Account name",
        max_length=200,
        help_text="Your team or project; you can invite others into it later.",
        widget=forms.TextInput(attrs={"autocomplete": "organization"}),
    )


class AcceptForm(PlainForm):
    """Joining an account by invitation: a password for a new login (none when signed in)."""

    # Filled from the link's fragment (#token=…) by the page's script; typed in without it.
    token = forms.CharField(
        label="Invitation code",
        max_length=200,
        help_text="The part of your link after #token=.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    password = forms.CharField(
        label="Choose a password",
        strip=False,
        required=False,
        help_text="At least 10 characters, not a common password and not only digits.",
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )


class LoginForm(PlainForm):
    email = forms.CharField(
        label="Email", max_length=254, widget=forms.EmailInput(attrs={"autocomplete": "email"})
    )
    password = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )


def show_error(form: forms.Form, exc: DomainError) -> None:
    """A service's error on the field it names (without the name, which the label shows), or
    above the form."""
    note_failure(exc.detail)
    if exc.field in form.fields:
        form.add_error(exc.field, exc.detail.removeprefix(f"{exc.field}: "))
    else:
        form.add_error(None, exc.detail)
