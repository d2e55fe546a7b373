"""Pages. Adapters only: one selector, one template."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sessions_app.models import Session


@login_required
def home(request: HttpRequest) -> HttpResponse:
    sessions = Session.objects.filter(owner_id=request.user.pk).order_by("-updated_at")[:50]
    return render(request, "home.html", {"sessions": sessions})
