// actonce console: the one script. It posts each form that changes something as JSON.
//
// The console takes JSON alone on a POST: a page of another site can make a browser send
// a form's own encodings to any address without asking it first, never JSON. So a form
// here goes out as fetch() of its fields, same-origin, with the session's cookie (and the
// form's token among the fields). The server answers {"location": URL} when it took the
// form, and the page again, the refusal shown and the fields kept, when it did not.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || form.method !== "post") {
    return; // the runs filter is a GET: the browser sends it as it is
  }
  event.preventDefault();
  submit(form);
});

async function submit(form) {
  const button = form.querySelector("button[type=submit]");
  if (button) button.disabled = true;
  try {
    await follow(form, await post(form));
  } catch (error) {
    say(form, "The console did not answer: reload the page to see whether it was recorded.");
  } finally {
    if (button) button.disabled = false;
  }
}

function post(form) {
  return fetch(form.action, {
    method: "POST",
    mode: "same-origin",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json, text/html" },
    body: JSON.stringify(Object.fromEntries(new FormData(form))),
  });
}

async function follow(form, answer) {
  if (answer.redirected) {
    location.assign(answer.url); // sent to sign in first
    return;
  }
  const type = answer.headers.get("Content-Type") || "";
  if (type.startsWith("text/html")) {
    showPage(await answer.text());
    return;
  }
  const body = type.startsWith("application/json") ? await answer.json() : {};
  if (answer.ok && typeof body.location === "string") {
    const next = new URL(body.location, location.href);
    if (next.origin === location.origin) {
      location.assign(next.href);
      return;
    }
  }
  // A refusal of the HTTP guard ({"reason", "message"}), or an answer nobody expected.
  say(form, body.message || `The console answered ${answer.status}.`);
}

function showPage(html) {
  // DOMParser runs no script of what it parses; this one's listener stays on the document.
  const page = new DOMParser().parseFromString(html, "text/html");
  document.title = page.title;
  document.body.replaceWith(document.adoptNode(page.body));
  const alert = document.querySelector("[role=alert]");
  if (alert) alert.scrollIntoView({ block: "center" });
}

function say(form, text) {
  let line = form.querySelector("p.error.said");
  if (!line) {
    line = document.createElement("p");
    line.className = "error said";
    line.setAttribute("role", "alert");
    form.prepend(line);
  }
  line.textContent = text;
}
