from __future__ import annotations

from django.contrib import admin
from django.urls import path

from sessions_app import views

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/login/", admin.site.login, name="login"),
    path("admin/", admin.site.urls),
]
