// The "Try it" box: JSON fields checked as they are typed, the schema shown only for a JSON
// schema answer, the logprob options only when logprobs are asked for. The form works without it.
"use strict";

function jsonObjectProblem(text) {
  if (!text.trim()) return "";
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? "" : "must be a JSON object";
  } catch (e) {
    return "must be a JSON object: " + e.message;
  }
}

function tryBox(form) {
  const el = (name) => form.elements.namedItem(name);
  for (const name of ["logit_bias", "json_schema"]) {
    const area = el(name);
    if (!area) continue;
    area.addEventListener("input", () => area.setCustomValidity(jsonObjectProblem(area.value)));
  }
  const format = el("response_format");
  const schema = form.querySelector("[data-try-schema]");
  const logprobs = el("logprobs");
  const options = form.querySelectorAll("[data-try-logprobs]");
  const sync = () => {
    if (format && schema) schema.hidden = format.value !== "json_schema";
    for (const row of options) row.hidden = !(logprobs && logprobs.checked);
  };
  if (format) format.addEventListener("change", sync);
  if (logprobs) logprobs.addEventListener("change", sync);
  sync();
  form.addEventListener("submit", (event) => {
    if (!form.checkValidity()) {
      event.preventDefault();
      form.reportValidity();
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-try]")) tryBox(form);
});
