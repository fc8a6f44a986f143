"""Anthropic's Messages routes, under /v1/ (beside the OpenAI-compatible ones)."""

from django.urls import path

from . import views

urlpatterns = [
    path("messages", views.MessagesView.as_view()),
    path("messages/count_tokens", views.CountTokensView.as_view()),
]
