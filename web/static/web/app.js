// Small progressive enhancements; every page works without them.
document.addEventListener("DOMContentLoaded", () => {
  // Selects that submit their form on change (the account switcher).
  for (const el of document.querySelectorAll("select[data-autosubmit]")) {
    el.addEventListener("change", () => el.form.submit());
  }
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
  // Forms that ask first: <form data-confirm="Delete …?">.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (e) => {
      if (!confirm(form.dataset.confirm)) e.preventDefault();
    });
  }
  // Live regions: <div data-refresh="URL" data-every="2000"> replaces its inner HTML with the
  // fragment the URL returns, while the page is visible.
  for (const el of document.querySelectorAll("[data-refresh]")) {
    const every = Number(el.dataset.every || 3000);
    const tick = async () => {
      if (document.visibilityState === "visible") {
        try {
          const r = await fetch(el.dataset.refresh, { headers: { "X-Fragment": "1" } });
          if (r.ok) el.innerHTML = await r.text();
        } catch { /* keep the last content; try again next tick */ }
      }
      setTimeout(tick, every);
    };
    setTimeout(tick, every);
  }
});
