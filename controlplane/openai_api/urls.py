"""OpenAI-compatible routes, under /v1/."""

from django.urls import path

from . import views

urlpatterns = [
    path("models", views.ModelsView.as_view()),
    path("models/<path:model>", views.ModelView.as_view()),
    path("chat/completions", views.ChatCompletionsView.as_view()),
    path("completions", views.CompletionsView.as_view()),
]
