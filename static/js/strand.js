/* Strand's page script: the live feed of a session, streaming text, keyboard shortcuts,
   tree folding and filtering. Everything else is htmx; without JavaScript the pages still
   work as plain links and forms.

   Live feed (see sessions_app/live/consumers.py): the socket sends committed events in seq
   order, then deltas. This page keeps the highest seq it has; an event at or below it is a
   duplicate and is dropped. A reconnect asks for events after that seq, so nothing is
   missed and nothing is shown twice. Committed events refresh the views from the server
   (one request, debounced); deltas are drawn as plain text into the in-flight bubble. */
(function () {
  "use strict";

  document.documentElement.classList.add("js");
  var body = document.body;
  var sessionId = body.dataset.session || null;

  var live = {
    sessionId: sessionId,
    lastSeq: Number(body.dataset.lastSeq || -1),
    received: [],      // seqs of events applied by this page, in order (tests read it)
    duplicates: 0,     // events dropped because their seq was already applied
    connects: 0,
    failures: 0,       // closes since the last `ready`: the reconnect delay grows with them
    lastCloseCode: 0,  // 4503: the server was too busy and asked to come back later
    connected: false,
    ready: false,
    socket: null,
    inflight: null,    // {turn, step, blocks: [{key, kind, text, name}]}
    committedSteps: {},
    refreshes: 0,
    staleRefreshes: 0, // refreshes dropped: the user chose a view after they started
    deltas: 0,         // streamed pieces drawn (the step in flight)
    toolOutput: {},    // call id -> the output of a running command seen so far (its tail)
    toolOutputPieces: 0,
    turnsEnded: 0,     // turn/end events seen
  };
  window.strandLive = live;

  // ---- websocket (htmx-ext-ws manages connecting and reconnecting) ----------------------

  if (window.htmx) {
    htmx.createWebSocket = function (url) {
      var target = new URL(url, window.location.href);
      if (target.pathname.indexOf("/ws/sessions/") === 0) {
        target.searchParams.set("after_seq", String(live.lastSeq));
      }
      var socket = new WebSocket(target.toString());
      live.socket = socket;
      return socket;
    };
    // The extension's own reconnects wait as long as this page's (one policy for both).
    htmx.config.wsReconnectDelay = function () {
      return reconnectDelay();
    };
  }

  // After a close, wait a random time between 0 and a cap that doubles with each close since
  // the last `ready` (0.5 s, 1 s, 2 s… up to 30 s): when a server restarts, or turns sockets
  // away with 4503 because too many connect at once, its viewers come back spread out instead
  // of all together, which would only repeat the storm. A page that has caught up (`ready`)
  // starts again from the shortest wait.
  var RECONNECT_BASE_MS = 500;
  var RECONNECT_MAX_MS = 30000;

  function reconnectDelay() {
    if (typeof live.reconnectDelayMs === "number") return live.reconnectDelayMs;
    var cap = Math.min(RECONNECT_MAX_MS, RECONNECT_BASE_MS * Math.pow(2, Math.max(0, live.failures - 1)));
    return Math.random() * cap;
  }

  body.addEventListener("htmx:wsOpen", function () {
    live.connected = true;
    live.connects += 1;
    // "live" only once the catch-up is done (`ready`): an open socket may still be turned
    // away (4503) or be sending what this page missed.
  });
  // htmx-ext-ws reconnects by itself after these close codes; after any other (a clean
  // close by a proxy or a restarting server, a socket closed on purpose) this page does.
  var EXTENSION_RETRIES = [1006, 1011, 1012, 1013];

  // The server closes a socket for good when its sign-in has gone (4401: signed out, a new
  // password, a disabled account) or when this user may no longer see the session (4403);
  // see sessions_app/live/access.py. Reconnecting would only be refused: say so instead.
  var CLOSED_FOR_GOOD = {
    4401: { state: "signed-out", text: "You were signed out; this page no longer updates.", link: "Sign in again" },
    4403: { state: "no-access", text: "You can no longer see this session.", link: "All sessions" },
  };

  body.addEventListener("htmx:wsClose", function (evt) {
    live.connected = false;
    live.ready = false;
    var code = evt.detail && evt.detail.event ? evt.detail.event.code : 0;
    live.lastCloseCode = code;
    if (CLOSED_FOR_GOOD[code]) {
      endLive(code);
      return;
    }
    live.failures += 1;
    setConnectionState("reconnecting");
    if (EXTENSION_RETRIES.indexOf(code) < 0) scheduleReconnect();
  });

  // A share link's guest (body[data-guest]) has no sign-in nor other sessions to go to.
  var GUEST_CLOSED = { state: "no-access", text: "This shared link was closed; this page no longer updates.", link: null };

  function endLive(code) {
    var reason = body.dataset.guest && code === 4403 ? GUEST_CLOSED : CLOSED_FOR_GOOD[code];
    live.closedCode = code;
    setConnectionState(reason.state);
    // Without its element the socket is never opened again (see scheduleReconnect).
    var element = document.getElementById("live-socket");
    if (element) element.remove();
    var flash = document.getElementById("flash");
    if (!flash || document.getElementById("live-ended")) return;
    var note = document.createElement("p");
    note.id = "live-ended";
    note.className = "flash-msg error";
    note.setAttribute("role", "alert");
    note.textContent = reason.text + " ";
    if (!reason.link) {
      flash.appendChild(note);
      return;
    }
    var link = document.createElement("a");
    link.href = code === 4401
      ? "/accounts/login/?next=" + encodeURIComponent(window.location.pathname + window.location.search)
      : "/";
    link.textContent = reason.link;
    note.appendChild(link);
    flash.appendChild(note);
  }

  function scheduleReconnect() {
    var delay = reconnectDelay();
    window.setTimeout(function () {
      var old = document.getElementById("live-socket");
      if (!old || live.connected || !window.htmx) return;
      // A fresh element gets a fresh socket from the extension (after the last seq).
      var fresh = old.cloneNode(false);
      old.replaceWith(fresh);
      htmx.process(fresh);
    }, delay);
  }
  body.addEventListener("htmx:wsBeforeMessage", function (evt) {
    evt.preventDefault(); // JSON, not HTML to swap
    var message;
    try {
      message = JSON.parse(evt.detail.message);
    } catch (e) {
      return;
    }
    handle(message);
  });

  function setConnectionState(state) {
    body.dataset.live = state;
    var note = document.getElementById("live-state");
    if (note) note.hidden = state !== "reconnecting";
  }

  function handle(message) {
    if (message.type === "event") {
      if (typeof message.seq !== "number" || message.seq <= live.lastSeq) {
        live.duplicates += 1;
        return;
      }
      live.lastSeq = message.seq;
      live.received.push(message.seq);
      onEvent(message);
    } else if (message.type === "ready") {
      live.ready = true;
      live.failures = 0;
      setConnectionState("live");
    } else if (message.type === "delta" && message.kind === "tool_output") {
      onToolOutput(message);
    } else if (message.type === "delta") {
      onDelta(message);
    }
  }

  function onEvent(event) {
    var kind = event.event;
    if (kind === "turn/end") live.turnsEnded += 1;
    if (kind === "assistant/message" || kind === "step/end" || kind === "turn/end") {
      if (event.turn != null && event.step != null) {
        live.committedSteps[event.turn + ":" + event.step] = true;
      }
      if (live.inflight && (kind === "turn/end" || (live.inflight.turn === event.turn && live.inflight.step === event.step))) {
        live.inflight = null;
      }
    }
    scheduleRefresh();
  }

  // ---- refreshing the views from the server ----------------------------------------------

  var refreshTimer = null;
  var refreshing = false;
  var refreshAgain = false;
  // A refresh asks for the views as they were when it started. The user's own requests into
  // #view (a view tab, a key, a tree click, a form) are choices: a refresh that started before
  // the newest choice, or that answers while one is in flight, never swaps over what the user
  // chose; it is dropped and asked again for the view now shown.
  var choices = 0;           // user requests into #view issued so far
  var choicesInFlight = 0;   // ... and not answered yet

  // A response for #view asked while another view was shown (a live refresh, an approval
  // or a tree click just before a view switch): drawing it would undo the switch. It is
  // dropped and the view shown now is refreshed instead. A view switch itself (a link that
  // pushes its URL) is the user's latest move, and is always drawn.
  body.addEventListener("htmx:beforeRequest", function (evt) {
    var view = document.getElementById("view");
    if (evt.detail.xhr) evt.detail.xhr.strandViewUrl = view ? view.dataset.liveUrl : null;
  });
  body.addEventListener("htmx:beforeSwap", function (evt) {
    var asked = evt.detail.xhr && evt.detail.xhr.strandViewUrl;
    var target = evt.detail.target;
    var view = document.getElementById("view");
    if (!asked || !view || !target || target.id !== "view" || view.dataset.liveUrl === asked) return;
    var elt = evt.detail.requestConfig && evt.detail.requestConfig.elt;
    if (elt && elt.closest && elt.closest("[hx-push-url]")) return;
    evt.detail.shouldSwap = false;
    scheduleRefresh();
  });

  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = window.setTimeout(function () {
      refreshTimer = null;
      refresh();
    }, 120);
  }

  function busyEditing() {
    var active = document.activeElement;
    var view = document.getElementById("view");
    return !!(active && view && view.contains(active) &&
      (active.tagName === "TEXTAREA" || active.tagName === "INPUT" || active.tagName === "SELECT"));
  }

  function refresh() {
    var view = document.getElementById("view");
    if (!view || !window.htmx) return;
    if (refreshing || busyEditing() || choicesInFlight > 0) {
      refreshAgain = true;
      // After a choice, its answer asks again (below); otherwise try again in a while.
      if (!refreshing && choicesInFlight === 0) window.setTimeout(refresh, 800);
      return;
    }
    refreshing = true;
    refreshAgain = false;
    var url = view.dataset.liveUrl;
    var choice = choices;
    // fetch and htmx.swap rather than htmx.ajax: htmx sends a response's events to the element
    // it replaces, which a view switch may already have taken out of the page, so the answer
    // is judged here, where it is known what the user chose since.
    window.fetch(url, {
      credentials: "same-origin",
      headers: { "HX-Request": "true", "HX-Current-URL": window.location.href },
    }).then(function (response) {
      if (!response.ok) throw new Error("refresh answered " + response.status);
      return response.text();
    }).then(function (html) {
      var now = document.getElementById("view");
      if (choice !== choices || choicesInFlight > 0 || !now || now.dataset.liveUrl !== url) {
        live.staleRefreshes += 1;
        refreshAgain = true;
        return;
      }
      stickToBottom = nearBottom();
      htmx.swap(now, html, { swapStyle: "outerHTML" });
      live.refreshes += 1;
    }).catch(function () {
      // The next event asks again.
    }).then(function () {
      refreshing = false;
      if (refreshAgain) scheduleRefresh();
    });
  }

  body.addEventListener("htmx:beforeRequest", function (evt) {
    var target = evt.detail.target;
    if (!target || !(target.id === "view" || (target.querySelector && target.querySelector("#view")))) {
      return;
    }
    choices += 1;
    choicesInFlight += 1;
    evt.detail.xhr.addEventListener("loadend", function () {
      choicesInFlight -= 1;
      if (choicesInFlight === 0 && refreshAgain && !refreshing) scheduleRefresh();
    });
  });

  // ---- refusals of htmx requests --------------------------------------------------------

  // A 429 swaps its own message into the flash area (base.html). Any other refusal of an htmx
  // request (400, 403, 404, 409, 413, a 5xx) is not swapped, so that the page stays as it was
  // with what the user typed; its message goes to the flash area instead of nowhere.
  function refusalText(xhr) {
    var text = xhr.responseText || "";
    var type = xhr.getResponseHeader("Content-Type") || "";
    try {
      if (type.indexOf("json") !== -1) {
        var data = JSON.parse(text);
        return String(data.detail || data.message || data.error || "");
      }
      var doc = new DOMParser().parseFromString(text, "text/html");
      var notice = doc.querySelector("[role=alert], .notice.error, .flash-msg");
      return notice ? notice.textContent.trim() : "";
    } catch (err) {
      return "";
    }
  }

  body.addEventListener("htmx:responseError", function (evt) {
    var xhr = evt.detail.xhr;
    if (!xhr || xhr.status === 429) return;
    var flash = document.getElementById("flash");
    if (!flash) return;
    var message = refusalText(xhr).slice(0, 500) ||
      (xhr.status >= 500 ? "The server failed to answer this request." : "This request was refused.");
    var line = document.createElement("p");
    line.className = "flash-msg error";
    line.setAttribute("role", "alert");
    line.dataset.status = String(xhr.status);
    line.textContent = message + " (" + xhr.status + ")";
    flash.replaceChildren(line);
  });

  // ---- a running command's output ------------------------------------------------------

  // What one command's live output keeps in the page: its latest characters (the result,
  // once recorded, replaces it with the head and tail the server kept).
  var TOOL_OUTPUT_KEEP = 64 * 1024;

  var subagentRedrawnAt = 0;
  var subagentTimer = null;

  function onToolOutput(delta) {
    var id = String(delta.block || "");
    if (!id) return;
    if (delta.name === "task") {
      // A subagent moved on (it wrote, or a turn or an approval of its began): its spans,
      // hung under the call in the trace, are redrawn at most once a second, and once
      // after the last such news.
      if (!subagentTimer) {
        var wait = Math.max(0, 1000 - (Date.now() - subagentRedrawnAt));
        subagentTimer = window.setTimeout(function () {
          subagentTimer = null;
          subagentRedrawnAt = Date.now();
          scheduleRefresh();
        }, wait);
      }
      if (!delta.text) return;
    }
    live.toolOutputPieces += 1;
    var text = (live.toolOutput[id] || "") + String(delta.text || "");
    if (text.length > TOOL_OUTPUT_KEEP) text = "[…]\n" + text.slice(text.length - TOOL_OUTPUT_KEEP);
    live.toolOutput[id] = text;
    drawToolOutput(id);
  }

  function drawToolOutput(id) {
    var el = document.querySelector('[data-live-call="' + CSS.escape(id) + '"]');
    if (!el) return;
    el.textContent = live.toolOutput[id];
    var details = el.closest("details");
    if (!details) return;
    details.open = true;
    // Output is coming: the call runs, whatever the chat said when it was drawn.
    var label = details.querySelector("summary .pill.pending");
    if (label) {
      label.classList.replace("pending", "running");
      label.textContent = "running";
      details.classList.replace("status-pending", "status-running");
    }
  }

  function drawToolOutputs() {
    Object.keys(live.toolOutput).forEach(drawToolOutput);
  }

  // ---- the step in flight --------------------------------------------------------------

  function onDelta(delta) {
    var key = delta.turn + ":" + delta.step;
    if (live.committedSteps[key]) return;
    if (delta.kind === "restart") {
      // A failed attempt is being retried: its answer starts again from nothing.
      if (live.inflight && live.inflight.turn === delta.turn && live.inflight.step === delta.step) {
        live.inflight.blocks = [];
        drawInflight();
      }
      return;
    }
    live.deltas += 1;
    if (!live.inflight || live.inflight.turn !== delta.turn || live.inflight.step !== delta.step) {
      live.inflight = { turn: delta.turn, step: delta.step, blocks: [] };
    }
    var blockKey = String(delta.kind) + ":" + String(delta.block);
    var block = null;
    for (var i = 0; i < live.inflight.blocks.length; i++) {
      if (live.inflight.blocks[i].key === blockKey) block = live.inflight.blocks[i];
    }
    if (!block) {
      block = { key: blockKey, kind: delta.kind, text: "", name: delta.name || null };
      live.inflight.blocks.push(block);
    }
    if (delta.name && !block.name) block.name = delta.name;
    block.text += String(delta.text || "");
    drawInflight();
  }

  function drawInflight() {
    var stream = document.getElementById("stream");
    if (!stream) return;
    var inflight = live.inflight;
    if (!inflight || !inflight.blocks.length) {
      stream.hidden = true;
      stream.textContent = "";
      return;
    }
    var stick = nearBottom();
    stream.hidden = false;
    stream.textContent = "";
    var head = document.createElement("header");
    head.className = "msg-head";
    var who = document.createElement("span");
    who.className = "who";
    who.textContent = "Assistant";
    head.appendChild(who);
    var note = document.createElement("span");
    note.className = "muted small";
    note.textContent = "writing…";
    head.appendChild(note);
    stream.appendChild(head);
    inflight.blocks.forEach(function (block) {
      var el = document.createElement("div");
      if (block.kind === "tool_call") {
        el.className = "stream-tool";
        el.textContent = "⚙ " + (block.name || "tool") + " " + block.text;
      } else if (block.kind === "thinking") {
        el.className = "stream-thinking";
        el.textContent = block.text;
      } else {
        el.className = "stream-text";
        el.textContent = block.text;
      }
      stream.appendChild(el);
    });
    if (stick) window.scrollTo(0, document.documentElement.scrollHeight);
  }

  // A sent message leaves the composer (a form marked data-clear-on-send), once the server
  // has taken it; a refused one stays, to be corrected.
  body.addEventListener("htmx:afterRequest", function (evt) {
    var form = evt.detail.elt;
    if (!evt.detail.successful || !form || !form.matches || !form.matches("form[data-clear-on-send]")) return;
    var field = form.querySelector("textarea");
    if (field) field.value = "";
  });

  // ---- Pi import with progress -------------------------------------------------------
  // The import form sends its file itself and reads the answer as JSON lines: the upload's
  // share, then the entries written as the server reads the file, then the new session's
  // address (or what is wrong with the file). Without JavaScript the form posts as usual.

  function importText(n) { return Number(n).toLocaleString("en-US"); }

  function importWithProgress(form) {
    var status = form.querySelector(".import-progress");
    var button = form.querySelector("button[type=submit]");
    var xhr = new XMLHttpRequest();
    var read = 0;
    var last = null;
    function show(text, failed) {
      status.hidden = false;
      status.textContent = text;
      status.classList.toggle("danger-text", Boolean(failed));
    }
    function lines() {
      var text = xhr.responseText;
      var end = text.lastIndexOf("\n");
      if (end < read) return;
      text.slice(read, end).split("\n").forEach(function (line) {
        if (!line) return;
        try { last = JSON.parse(line); } catch (e) { return; }
        if (last.entries !== undefined && last.total !== undefined) {
          var share = last.total ? Math.min(100, Math.floor(100 * last.bytes / last.total)) : 100;
          show("Importing: " + importText(last.entries) + " entries written (" + share + "% of the file read)");
        }
      });
      read = end + 1;
    }
    xhr.upload.onprogress = function (evt) {
      if (evt.lengthComputable) show("Uploading: " + Math.floor(100 * evt.loaded / evt.total) + "%");
    };
    xhr.onprogress = lines;
    xhr.onload = function () {
      var type = xhr.getResponseHeader("Content-Type") || "";
      if (xhr.status === 200 && type.indexOf("application/x-ndjson") !== 0 && xhr.responseURL) {
        window.location.assign(xhr.responseURL); // refused before importing: the page says why
        return;
      }
      lines();
      if (last && last.session) {
        show("Imported " + importText(last.entries) + " entries" +
          (last.warnings ? "; " + importText(last.warnings) + " lines skipped." : "."));
        window.location.assign(last.session);
        return;
      }
      button.disabled = false;
      show(last && last.error ? last.error : "The import failed (HTTP " + xhr.status + ").", true);
    };
    xhr.onerror = function () {
      button.disabled = false;
      show("The import failed: the connection was lost.", true);
    };
    xhr.open("POST", form.action);
    xhr.setRequestHeader("Accept", "application/x-ndjson");
    button.disabled = true;
    show("Uploading…");
    xhr.send(new FormData(form));
  }

  body.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (!form.matches || !form.matches("form[data-import-progress]") || !window.XMLHttpRequest) return;
    evt.preventDefault();
    importWithProgress(form);
  });

  // Drawn again as soon as a refresh swaps the chat in, and once it settles.
  body.addEventListener("htmx:afterSwap", drawToolOutputs);

  body.addEventListener("htmx:afterSettle", function (evt) {
    drawInflight();
    drawToolOutputs();
    applyFolds();
    applyTreeFilter();
    focusTarget(evt.target);
  });

  // ---- keyboard ------------------------------------------------------------------------

  var VIEW_KEYS = { "1": "chat", c: "chat", "2": "trace", t: "trace", "3": "context", x: "context", "4": "files" };

  document.addEventListener("keydown", function (evt) {
    var target = evt.target;
    var typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" ||
      target.tagName === "SELECT" || target.isContentEditable);
    if (typing) {
      if (evt.key === "Enter" && (evt.ctrlKey || evt.metaKey) && target.tagName === "TEXTAREA" && target.form) {
        evt.preventDefault();
        var primary = target.form.querySelector("button.primary[type=submit]");
        target.form.requestSubmit(primary || undefined);
      } else if (evt.key === "Escape") {
        target.blur();
      }
      return;
    }
    if (evt.ctrlKey || evt.metaKey || evt.altKey) return;
    var view = VIEW_KEYS[evt.key];
    if (view) {
      var tab = document.querySelector('[data-view-tab="' + view + '"]');
      if (tab) {
        evt.preventDefault();
        // A tab swapped in a moment ago may not be wired up by htmx yet.
        if (window.htmx) htmx.process(tab);
        tab.click();
      }
      return;
    }
    if (evt.key === "/") {
      var field = document.querySelector("[data-search]") || document.querySelector("[data-composer]");
      if (field) {
        evt.preventDefault();
        field.focus();
      }
    } else if (evt.key === "?") {
      toggleHelp();
    } else if (evt.key === "b") {
      body.classList.toggle("tree-hidden");
    } else if (evt.key === "j" || evt.key === "k") {
      step(evt.key === "j" ? 1 : -1);
    }
  });

  function step(direction) {
    var items = Array.prototype.slice.call(document.querySelectorAll(".span-name, .turn-title, .chat > .msg, .chat > .card"));
    if (!items.length) return;
    var index = items.indexOf(document.activeElement);
    var next = items[Math.max(0, Math.min(items.length - 1, index + direction))];
    if (index < 0) next = items[direction > 0 ? 0 : items.length - 1];
    if (!next.hasAttribute("tabindex") && next.tagName !== "A") next.setAttribute("tabindex", "-1");
    next.focus();
    next.scrollIntoView({ block: "nearest" });
    if (next.classList.contains("span-name") || next.classList.contains("turn-title")) next.click();
  }

  function toggleHelp() {
    var help = document.getElementById("help");
    if (!help || typeof help.showModal !== "function") return;
    if (help.open) help.close(); else help.showModal();
  }
  document.addEventListener("click", function (evt) {
    var toggle = evt.target.closest && evt.target.closest("[data-help-toggle]");
    if (toggle) toggleHelp();
  });

  // ---- tree: folding and filtering ------------------------------------------------------

  var foldKey = sessionId ? "strand-folds-" + sessionId : null;

  function folds() {
    if (!foldKey) return {};
    try {
      return JSON.parse(window.sessionStorage.getItem(foldKey) || "{}");
    } catch (e) {
      return {};
    }
  }

  function saveFolds(value) {
    if (!foldKey) return;
    try {
      window.sessionStorage.setItem(foldKey, JSON.stringify(value));
    } catch (e) { /* private mode: folding still works until reload */ }
  }

  function applyFolds() {
    var rows = Array.prototype.slice.call(document.querySelectorAll("#tree .node"));
    var folded = folds();
    var hideBelow = null;
    rows.forEach(function (row) {
      var depth = Number(row.dataset.depth);
      if (hideBelow !== null && depth > hideBelow) {
        row.classList.add("folded-away");
        return;
      }
      hideBelow = null;
      row.classList.remove("folded-away");
      var button = row.querySelector("[data-fold]");
      var isFolded = !!folded[row.dataset.id];
      if (button) {
        button.setAttribute("aria-expanded", isFolded ? "false" : "true");
      }
      if (isFolded && button) hideBelow = depth;
    });
  }

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest("[data-fold]");
    if (!button) return;
    var row = button.closest(".node");
    var value = folds();
    if (value[row.dataset.id]) delete value[row.dataset.id]; else value[row.dataset.id] = true;
    saveFolds(value);
    applyFolds();
  });

  var treeShow = "all";

  function applyTreeFilter() {
    var tree = document.getElementById("tree");
    if (!tree) return;
    var input = tree.querySelector("[data-tree-filter]");
    var text = input ? input.value.trim().toLowerCase() : "";
    tree.querySelectorAll("[data-tree-show]").forEach(function (b) {
      b.classList.toggle("on", b.dataset.treeShow === treeShow);
    });
    var filtering = !!text || treeShow !== "all";
    tree.classList.toggle("filtering", filtering);
    if (!filtering) return;
    tree.querySelectorAll(".node").forEach(function (row) {
      var label = row.textContent.toLowerCase();
      var ok = !text || label.indexOf(text) >= 0;
      if (treeShow === "messages") ok = ok && (row.classList.contains("r-user") || row.classList.contains("r-assistant"));
      if (treeShow === "labeled") ok = ok && row.classList.contains("labeled");
      row.classList.toggle("no-match", !ok);
    });
  }

  document.addEventListener("input", function (evt) {
    if (evt.target.matches && evt.target.matches("[data-tree-filter]")) applyTreeFilter();
  });
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest("[data-tree-show]");
    if (!button) return;
    treeShow = button.dataset.treeShow;
    applyTreeFilter();
  });

  // ---- tree: reading on ----------------------------------------------------------------

  // A link of the tree that stands for another window (templates: tree-rows) is replaced by
  // that window's lines. Opened from the keyboard, the focus goes on to the first of them,
  // so that Tab keeps walking the tree where the link was.
  var treeFocusAfter = null;
  body.addEventListener("htmx:beforeSwap", function (evt) {
    var elt = evt.detail.requestConfig && evt.detail.requestConfig.elt;
    if (!elt || !elt.matches || !elt.matches("[data-tree-load]")) return;
    var item = elt.closest("li");
    treeFocusAfter = elt === document.activeElement && item
      ? { list: item.parentNode, before: item.previousElementSibling }
      : null;
  });
  body.addEventListener("htmx:afterSettle", function () {
    var place = treeFocusAfter;
    treeFocusAfter = null;
    if (!place || !place.list) return;
    var first = place.before ? place.before.nextElementSibling : place.list.firstElementChild;
    var target = first && first.querySelector(".node-text, a");
    if (target) target.focus();
  });

  // ---- deep links: scroll the targeted entry into view -------------------------------------

  function focusTarget(root) {
    if (!root || !root.querySelector) return;
    var target = root.querySelector(".msg.target, .card.target");
    if (target && root.id === "view") target.scrollIntoView({ block: "center" });
  }

  function revealLeafInTree() {
    var node = document.querySelector("#tree .node.shown-leaf");
    var box = document.querySelector(".tree-details");
    if (!node || !box || box.scrollHeight <= box.clientHeight) return;
    var top = node.offsetTop - box.offsetTop;
    if (top < box.scrollTop || top > box.scrollTop + box.clientHeight - 40) {
      box.scrollTop = Math.max(0, top - box.clientHeight / 2);
    }
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 160;
  }

  var stickToBottom = false;
  body.addEventListener("htmx:beforeSwap", function (evt) {
    stickToBottom = evt.detail.target && evt.detail.target.id === "view" && nearBottom();
  });
  body.addEventListener("htmx:afterSettle", function () {
    revealLeafInTree();
    var view = document.getElementById("view");
    if (stickToBottom && view && view.dataset.view === "chat" && !document.querySelector(".msg.target")) {
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
    stickToBottom = false;
  });

  document.addEventListener("DOMContentLoaded", function () {
    // On a narrow screen the tree starts folded away above the views.
    var treeBox = document.querySelector(".tree-details");
    if (treeBox && window.matchMedia && window.matchMedia("(max-width: 860px)").matches) {
      treeBox.open = false;
    }
    applyFolds();
    revealLeafInTree();
    var target = document.querySelector(".msg.target, .card.target");
    var view = document.getElementById("view");
    if (target) {
      if (!window.location.hash) target.scrollIntoView({ block: "center" });
    } else if (view && view.dataset.view === "chat") {
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
  });
})();
