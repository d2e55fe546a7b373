"""Forms of the pages. They parse and bound what users type; services decide the rest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.conf import settings

from sessions_app import access, workspaces
from sessions_app.errors import DomainError
from sessions_app.presets import OFFLINE
from sessions_app.presets import presets as available_presets

MAX_MESSAGE_CHARS = 100_000
MAX_LABEL_CHARS = 200
MAX_INSTRUCTIONS_CHARS = 4_000
ENTRY_ID_CHARS = 64


def preset_choices() -> list[tuple[str, str]]:
    """The server's presets, the offline model first (the default)."""
    try:
        found = available_presets()
    except DomainError:
        found = {OFFLINE: {"provider": "offline"}}
    return [(name, _preset_label(name, preset)) for name, preset in found.items()]


def _preset_label(name: str, preset: Mapping[str, Any]) -> str:
    if name == OFFLINE:
        return "Offline model (built in)"
    return f"{name} — {preset.get('provider', '?')} / {preset.get('model', '?')}"


class SearchForm(forms.Form):
    q = forms.CharField(max_length=200, required=False, strip=True)


class SessionNewForm(forms.Form):
    title = forms.CharField(max_length=500, required=False, strip=True)
    preset = forms.ChoiceField(choices=(), initial=OFFLINE)
    cwd = forms.CharField(max_length=4096, required=False, strip=True)

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        field = self.fields["preset"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = preset_choices()
        # Empty: the session gets a folder of its own (`workspaces.NEW_FOLDER`). Folders are
        # typed relative to the user's own: the server's layout is nobody's business.
        self.has_workspace = workspaces.own_folder(user) is not None

    def clean_preset(self) -> str:
        try:
            return access.check_preset(self.cleaned_data["preset"])
        except DomainError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any] | None:
        # The folder is checked (and made) only once the rest of the form is valid, so that
        # a refused form writes nothing.
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            self.cleaned_data["cwd"] = workspaces.cwd_for(
                self.user, str(self.cleaned_data.get("cwd") or "")
            )
        except DomainError as exc:
            self.add_error("cwd", str(exc))
        return self.cleaned_data


class SessionImportForm(forms.Form):
    file = forms.FileField()
    title = forms.CharField(max_length=500, required=False, strip=True)

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        limit = settings.STRAND_MAX_IMPORT_BYTES  # the API's limit too
        if upload.size > limit:
            raise forms.ValidationError(f"The file is larger than {limit // (1024 * 1024)} MB.")
        return upload


class RenameForm(forms.Form):
    title = forms.CharField(max_length=500, strip=True)


class MessageForm(forms.Form):
    MODES = (("message", "Send"), ("steer", "Steer"), ("follow_up", "Follow-up"))

    text = forms.CharField(max_length=MAX_MESSAGE_CHARS, strip=False, widget=forms.Textarea)
    mode = forms.ChoiceField(choices=MODES, required=False)

    def clean_text(self) -> str:
        text = str(self.cleaned_data["text"])
        if not text.strip():
            raise forms.ValidationError("Write a message first.")
        return text

    def clean_mode(self) -> str:
        return str(self.cleaned_data.get("mode") or "message")


class EntryForm(forms.Form):
    entry_id = forms.CharField(max_length=ENTRY_ID_CHARS, strip=True)


class LeafForm(forms.Form):
    """Where to move the current leaf; an empty entry id moves it before the first entry."""

    entry_id = forms.CharField(max_length=ENTRY_ID_CHARS, required=False, strip=True)
    summarize = forms.BooleanField(required=False)
    instructions = forms.CharField(max_length=MAX_INSTRUCTIONS_CHARS, required=False)

    def target(self) -> str | None:
        return self.cleaned_data.get("entry_id") or None


class ResendForm(EntryForm):
    text = forms.CharField(max_length=MAX_MESSAGE_CHARS, strip=False, widget=forms.Textarea)

    def clean_text(self) -> str:
        text = str(self.cleaned_data["text"])
        if not text.strip():
            raise forms.ValidationError("Write a message first.")
        return text


class ForkForm(EntryForm):
    title = forms.CharField(max_length=500, required=False, strip=True)


class LabelForm(EntryForm):
    """An empty label clears the entry's label (as in Pi)."""

    label = forms.CharField(max_length=MAX_LABEL_CHARS, required=False, strip=True)


class ApprovalForm(forms.Form):
    outcome = forms.ChoiceField(choices=(("allowed", "Allow"), ("rejected", "Reject")))


class CompactForm(forms.Form):
    instructions = forms.CharField(max_length=MAX_INSTRUCTIONS_CHARS, required=False)


class ReplayForm(forms.Form):
    """A replay of a recorded request: the presets (each run `count` times) and optional
    overrides; left empty, the system prompt is the recorded one and the parameters the
    preset's. The service checks the bounds again (`sessions_app.services.replay`)."""

    presets = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    count = forms.IntegerField(min_value=1, max_value=5, initial=1)
    system_prompt = forms.CharField(max_length=100_000, required=False, strip=False)
    temperature = forms.FloatField(min_value=0.0, max_value=2.0, required=False)
    max_tokens = forms.IntegerField(min_value=1, max_value=1_000_000, required=False)
    thinking_level = forms.ChoiceField(
        required=False,
        choices=[("", "the preset's")]
        + [(level, level) for level in ("off", "minimal", "low", "medium", "high", "xhigh")],
    )

    def __init__(self, *args: Any, preset_names: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["presets"]
        assert isinstance(field, forms.MultipleChoiceField)
        field.choices = [(name, name) for name in preset_names]

    def params(self) -> dict[str, Any]:
        data = self.cleaned_data
        chosen = {"temperature": data.get("temperature"), "max_tokens": data.get("max_tokens")}
        return {name: value for name, value in chosen.items() if value is not None}
