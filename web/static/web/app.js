// Small progressive enhancements; every page works without them.
"use strict";

function enhance(root) {
  // Controls that submit their form on change (the account switcher, filters, chart options).
  for (const el of root.querySelectorAll("select[data-autosubmit], input[data-autosubmit]")) {
    el.addEventListener("change", () => el.form.submit());
  }
  // Chart values at once on hover or touch: each band of a chart carries its values.
  for (const svg of root.querySelectorAll("svg.chart")) chartTips(svg);
  // On a phone a table's rows are cards: each cell says which column it is.
  for (const table of root.querySelectorAll("table")) labelCells(table);
}

function labelCells(table) {
  const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  if (!heads.length) return;
  for (const row of table.querySelectorAll("tbody tr")) {
    [...row.children].forEach((cell, i) => {
      if (cell.tagName === "TD" && !cell.dataset.label && heads[i]) cell.dataset.label = heads[i];
    });
  }
}

function chartTips(svg) {
  const box = svg.closest("figure");
  if (!box || box.querySelector(".chart-tip")) return;
  const tip = document.createElement("div");
  tip.className = "chart-tip";
  tip.hidden = true;
  tip.setAttribute("role", "status");
  box.appendChild(tip);
  const show = (band) => {
    tip.textContent = band.dataset.tip;
    tip.hidden = false;
    for (const b of svg.querySelectorAll("rect.hover.on")) b.classList.remove("on");
    band.classList.add("on");
  };
  for (const band of svg.querySelectorAll("rect.hover")) {
    band.addEventListener("mouseenter", () => show(band));
    band.addEventListener("click", () => show(band));
  }
  svg.addEventListener("mouseleave", () => {
    tip.hidden = true;
    for (const b of svg.querySelectorAll("rect.hover.on")) b.classList.remove("on");
  });
}

function copyButtons() {
  // Copy buttons: <button data-copy="#id">.
  for (const btn of document.querySelectorAll("button[data-copy]")) {
    btn.addEventListener("click", async () => {
      const target = document.querySelector(btn.dataset.copy);
      if (!target) return;
      try {
        await navigator.clipboard.writeText(target.innerText);
        btn.textContent = "Copied";
      } catch {
        const range = document.createRange();
        range.selectNodeContents(target);
        getSelection().removeAllRanges();
        getSelection().addRange(range);
      }
    });
  }
}

function confirmations() {
  // Forms that ask first: <form data-confirm="Delete …?">.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (e) => {
      if (!confirm(form.dataset.confirm)) e.preventDefault();
    });
  }
}

function liveRegions() {
  // <div data-refresh="URL" data-every="2000"> replaces its inner HTML with the fragment the URL
  // returns, while the page is visible and nobody is pointing at or typing in it.
  for (const el of document.querySelectorAll("[data-refresh]")) {
    const every = Number(el.dataset.every || 3000);
    const tick = async () => {
      const busy = el.matches(":hover") || el.contains(document.activeElement);
      if (document.visibilityState === "visible" && !busy) {
        try {
          const r = await fetch(el.dataset.refresh, { headers: { "X-Fragment": "1" } });
          if (r.ok) {
            el.innerHTML = await r.text();
            enhance(el);
          }
        } catch { /* keep the last content; try again next tick */ }
      }
      setTimeout(tick, every);
    };
    setTimeout(tick, every);
  }
}

function codeEditors() {
  // A JSON editor with line numbers: the gutter follows the text and its scrolling, and the line
  // an error names stays marked until the text is changed.
  for (const box of document.querySelectorAll("[data-code-editor]")) {
    const area = box.querySelector("textarea");
    const gutter = box.querySelector(".gutter");
    if (!area || !gutter) continue;
    let marked = Number(box.dataset.marked || 0);
    const draw = () => {
      const count = area.value.split("\n").length;
      const items = [];
      for (let n = 1; n <= count; n++) {
        items.push(`<li id="line-${n}"${n === marked ? ' class="marked"' : ""}>${n}</li>`);
      }
      gutter.innerHTML = items.join("");
    };
    area.addEventListener("input", () => { marked = 0; draw(); });
    area.addEventListener("scroll", () => { gutter.scrollTop = area.scrollTop; });
    draw();
    for (const link of document.querySelectorAll("a.line-ref")) {
      link.addEventListener("click", (e) => {
        e.preventDefault();
        const lines = area.value.split("\n");
        const start = lines.slice(0, marked - 1).join("\n").length + (marked > 1 ? 1 : 0);
        area.focus();
        area.setSelectionRange(start, start + (lines[marked - 1] || "").length);
      });
    }
  }
}

function actionPickers() {
  // The simulator's list of actions: a search box that narrows it, and a count of the chosen.
  for (const picker of document.querySelectorAll("[data-action-picker]")) {
    const search = picker.querySelector("[data-action-search]");
    const count = picker.querySelector("[data-picked-count]");
    const boxes = [...picker.querySelectorAll("input[type=checkbox]")];
    const recount = () => { count.textContent = boxes.filter((b) => b.checked).length; };
    for (const b of boxes) b.addEventListener("change", recount);
    recount();
    search.hidden = false;
    search.addEventListener("input", () => {
      const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
      for (const option of picker.querySelectorAll(".action-option")) {
        const text = option.dataset.text;
        option.hidden = !words.every((w) => text.includes(w)) && !option.querySelector(":checked");
      }
      for (const group of picker.querySelectorAll(".action-group")) {
        group.hidden = !group.querySelector(".action-option:not([hidden])");
      }
    });
  }
}

function memberWarnings() {
  // The invitation form warns, as the address is typed, that it belongs to a member already.
  for (const form of document.querySelectorAll("form[data-members]")) {
    const source = document.querySelector(form.dataset.members);
    const email = form.querySelector("input[type=email]");
    const warning = form.querySelector(".warning");
    if (!source || !email || !warning) continue;
    const members = JSON.parse(source.textContent).map((m) => m.toLowerCase());
    email.addEventListener("input", () => {
      const typed = email.value.trim().toLowerCase();
      const member = members.includes(typed);
      warning.hidden = !member;
      warning.textContent = member
        ? `${typed} is already a member of this account: change their membership on their page instead.`
        : "";
    });
  }
}

function estimates() {
  // The new-session form's cost example, for the base model chosen and the run typed in.
  for (const box of document.querySelectorAll("[data-estimate]")) {
    const prices = JSON.parse(document.querySelector(box.dataset.estimate).textContent);
    const model = document.querySelector("#id_base_model");
    const inputs = box.querySelector(".estimate-inputs");
    inputs.hidden = false;
    const value = (name) => Math.max(0, Number(box.querySelector(`[data-in=${name}]`).value) || 0);
    const money = (x) => {
      const fixed = x.toFixed(6).replace(/0+$/, "");
      const [whole, frac] = fixed.split(".");
      return `$${Number(whole).toLocaleString("en-US")}.${(frac || "").padEnd(2, "0")}`;
    };
    const update = () => {
      const price = Number((prices[model && model.value] || {}).train_tokens || 0);
      const steps = value("steps"), sequences = value("sequences"), tokens = value("tokens");
      const count = steps * sequences * tokens;
      const out = (name, text) => { box.querySelector(`[data-out=${name}]`).textContent = text; };
      out("steps", steps.toLocaleString("en-US"));
      out("sequences", sequences.toLocaleString("en-US"));
      out("tokens", tokens.toLocaleString("en-US"));
      out("count", count.toLocaleString("en-US"));
      out("cost", money((count * price) / 1e6));
    };
    for (const input of box.querySelectorAll("input")) input.addEventListener("input", update);
    if (model) model.addEventListener("change", update);
  }
}

function invitationCode() {
  // An invitation link carries its token in the fragment (#token=…), which browsers send to no
  // server: put it in the form, and take it out of the address bar.
  const form = document.querySelector("form[data-invitation]");
  const found = /^#token=([\w-]{1,200})$/.exec(location.hash);
  if (!form || !found) return;
  const input = form.querySelector("input[name=token]");
  input.value = found[1];
  input.closest(".row").hidden = true;
  history.replaceState(null, "", location.pathname + location.search);
}

function backLinks() {
  // <a data-back>: the previous page when there is one (the href is the fallback).
  for (const link of document.querySelectorAll("a[data-back]")) {
    link.addEventListener("click", (event) => {
      if (history.length > 1) {
        event.preventDefault();
        history.back();
      }
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  enhance(document);
  invitationCode();
  backLinks();
  copyButtons();
  confirmations();
  liveRegions();
  codeEditors();
  actionPickers();
  memberWarnings();
  estimates();
});
