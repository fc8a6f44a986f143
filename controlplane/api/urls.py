"""The Tinker JSON protocol and Loopwright's own resources, under /api/v1/."""

from django.urls import path

from .apis import futures, meta, models, sampling, sessions, training

urlpatterns = [
    path("healthz", meta.healthz, name="healthz"),
    path("client/config", meta.client_config),
    path("get_server_capabilities", meta.get_server_capabilities),
    path("telemetry", meta.telemetry),
    path("base_models", meta.base_models),
    path("base_models/tokenizer", meta.tokenizer),
    path("create_session", sessions.create_session),
    path("session_heartbeat", sessions.session_heartbeat),
    path("sessions", sessions.session_list),
    path("sessions/<str:session_id>", sessions.session_detail),
    path("sessions/<str:session_id>/stop", sessions.session_stop),
    path("create_model", models.create_model),
    path("get_info", models.get_info),
    path("unload_model", models.unload_model),
    path("weights_info", models.weights_info),
    path("training_runs", models.training_runs),
    path("training_runs/<str:model_id>", models.training_run),
    path("training_runs/<str:model_id>/checkpoints", models.training_run_checkpoints),
    path("forward", training.forward),
    path("forward_backward", training.forward_backward),
    path("optim_step", training.optim_step),
    path("save_weights", training.save_weights),
    path("save_weights_for_sampler", training.save_weights_for_sampler),
    path("load_weights", training.load_weights),
    path("create_sampling_session", sampling.create_sampling_session),
    path("asample", sampling.asample),
    path("samplers/<str:sampler_id>", sampling.sampler_detail),
    path("retrieve_future", futures.retrieve_future),
]
