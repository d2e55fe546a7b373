/* The script of an exported session file: draw the tree and the chat of any branch from
   the session's entries, switch views, show span details, and offer the Pi session file.
   No network is used.

   Each entry is in the file once, as a line of the Pi file (#pi-jsonl); the chat of a branch
   is drawn from the path of its tip, as the pages' chat projection draws it: tool results
   under the call that asked for them, the latest compaction as a card holding what it
   replaced. Text is set as text (never as markup), so nothing in a session can run here. */
(function () {
  "use strict";
  var body = document.body;
  var currentLeaf = body.dataset.leaf || "";
  var CLIP = 20000;

  // ---- the entries -------------------------------------------------------------------

  var source = document.getElementById("pi-jsonl");
  var piText = source ? source.textContent : "";
  var byId = Object.create(null);
  var lastId = "";
  piText.split("\n").forEach(function (line, index) {
    if (index === 0 || !line) return; // the first line is the session header
    var entry;
    try {
      entry = JSON.parse(line);
    } catch (e) {
      return;
    }
    if (entry && typeof entry.id === "string") {
      byId[entry.id] = entry;
      lastId = entry.id;
    }
  });
  var facts = { errorCodes: {}, approvals: {} };
  var factsNode = document.getElementById("tool-facts");
  if (factsNode) {
    try {
      facts = JSON.parse(factsNode.textContent) || facts;
    } catch (e) { /* the chat shows calls without their recorded error codes */ }
  }

  function pathTo(tip) {
    // Root first; Pi's rules: an unknown tip means the last entry; a missing or repeated
    // parent ends the path.
    var id = byId[tip] ? tip : (tip ? lastId : "");
    var path = [];
    var seen = Object.create(null);
    while (id && byId[id] && !seen[id]) {
      seen[id] = true;
      path.push(byId[id]);
      id = byId[id].parentId;
    }
    return path.reverse();
  }

  // ---- small builders ----------------------------------------------------------------

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clip(text) {
    text = String(text || "");
    if (text.length <= CLIP) return text;
    return text.slice(0, CLIP) + "\n… " + (text.length - CLIP).toLocaleString() + " more characters";
  }

  function contentText(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content
      .filter(function (b) { return b && b.type === "text"; })
      .map(function (b) { return String(b.text || ""); })
      .join("\n");
  }

  var IMAGE_TYPES = { "image/png": 1, "image/jpeg": 1, "image/gif": 1, "image/webp": 1 };

  function images(content, parent, alt) {
    if (!Array.isArray(content)) return;
    content.forEach(function (block) {
      if (!block || block.type !== "image") return;
      var mime = String(block.mimeType || "").toLowerCase();
      var data = String(block.data || "");
      if (!IMAGE_TYPES[mime] || !/^[A-Za-z0-9+/=\s]+$/.test(data)) return;
      var img = el("img", "attachment");
      img.alt = alt;
      img.loading = "lazy";
      img.src = "data:" + mime + ";base64," + data.replace(/\s+/g, "");
      parent.appendChild(img);
    });
  }

  function stamp(value) {
    var when = typeof value === "number" ? new Date(value) : new Date(String(value || ""));
    return isNaN(when.getTime()) ? "" : when.toLocaleString();
  }

  function head(entry, who, extras) {
    var header = el("header", "msg-head");
    header.appendChild(el("span", "who", who));
    (extras || []).forEach(function (node) { header.appendChild(node); });
    var time = el("time", "", stamp(entry.timestamp));
    time.dateTime = String(entry.timestamp || "");
    header.appendChild(time);
    return header;
  }

  function article(entry, className, who, extras) {
    var node = el("article", "msg " + className);
    node.id = "entry-" + entry.id;
    node.dataset.entry = entry.id;
    node.appendChild(head(entry, who, extras));
    return node;
  }

  function plainBody(text, className) {
    return el("div", className || "body plain", text);
  }

  function argsLine(args) {
    var line;
    if (args && typeof args === "object" && !Array.isArray(args)) {
      line = Object.keys(args).map(function (key) {
        var value = typeof args[key] === "string" ? args[key] : JSON.stringify(args[key]);
        value = String(value).split(/\s+/).join(" ");
        return key + "=" + value.slice(0, 60) + (value.length > 60 ? "…" : "");
      }).join(", ");
    } else {
      line = String(args === undefined || args === null ? "" : args).split(/\s+/).join(" ");
    }
    return line.slice(0, 120) + (line.length > 120 ? "…" : "");
  }

  var STATUS_TEXT = { ok: "done", waiting_approval: "needs approval", not_started: "not started", interrupted: "outcome unknown" };

  function callStatus(result, approval) {
    if (!result) return approval === "asked" ? "waiting_approval" : "pending";
    var code = facts.errorCodes[result.id];
    if (code === "TOOL_OUTCOME_UNKNOWN") return "interrupted";
    if (code === "TOOL_NOT_STARTED") return "not_started";
    if (code === "ABORTED_BEFORE_DISPATCH" || code === "ABORTED") return "aborted";
    if (approval === "rejected") return "rejected";
    return result.message && result.message.isError ? "error" : "ok";
  }

  function pill(kind, text) {
    return el("span", "pill " + kind, text);
  }

  // ---- one entry ---------------------------------------------------------------------

  function toolCall(call, result) {
    var approval = facts.approvals[String(call.id)];
    var status = callStatus(result, approval);
    var box = el("details", "tool status-" + status);
    box.dataset.call = String(call.id);
    var summary = el("summary");
    summary.appendChild(el("span", "tool-icon", "⚙"));
    summary.appendChild(el("span", "tool-name", call.name || ""));
    summary.appendChild(el("code", "args", argsLine(call.arguments)));
    summary.appendChild(pill(status, STATUS_TEXT[status] || status));
    box.appendChild(summary);
    var io = el("div", "tool-io");
    io.appendChild(el("h4", "", "Arguments"));
    io.appendChild(el("pre", "code", JSON.stringify(call.arguments, null, 2)));
    if (result) {
      var title = el("h4", "", "Result");
      var code = facts.errorCodes[result.id];
      if (result.message.isError) {
        title.appendChild(document.createTextNode(" "));
        title.appendChild(pill("error", "error" + (code ? " · " + code : "")));
      }
      io.appendChild(title);
      io.appendChild(el("pre", "output", clip(contentText(result.message.content))));
      images(result.message.content, io, "Image returned by " + (call.name || "a tool"));
    } else {
      io.appendChild(el("p", "muted small", status === "waiting_approval" ? "Waiting for approval." : "No result yet."));
    }
    box.appendChild(io);
    return box;
  }

  function notice(message) {
    var reason = message.stopReason;
    if (reason === "aborted") return el("p", "notice aborted", "Aborted");
    if (reason === "error") return el("p", "notice error", "Error: " + (message.errorMessage || "unknown error"));
    if (reason === "length") return el("p", "notice max_tokens", "Stopped at the output token limit");
    return null;
  }

  function assistant(entry, message, results) {
    var extras = [];
    if (message.model) extras.push(el("span", "model muted", message.model));
    var usage = message.usage || {};
    var total = Number(usage.totalTokens) || ["input", "output", "cacheRead", "cacheWrite"].reduce(function (sum, key) {
      return sum + (Number(usage[key]) || 0);
    }, 0);
    if (total) extras.push(el("span", "muted small", total.toLocaleString() + " tokens"));
    var node = article(entry, "assistant", "Assistant", extras);
    var blocks = Array.isArray(message.content) ? message.content.filter(Boolean) : [];
    blocks.forEach(function (block) {
      if (block.type !== "thinking" || !String(block.thinking || "").trim()) return;
      var thought = el("details", "thinking");
      thought.appendChild(el("summary", "", "Thinking"));
      thought.appendChild(plainBody(block.thinking, "plain"));
      node.appendChild(thought);
    });
    var text = blocks
      .filter(function (b) { return b.type === "text" && String(b.text || "").trim(); })
      .map(function (b) { return String(b.text); })
      .join("\n\n");
    if (text) node.appendChild(plainBody(text));
    var calls = blocks.filter(function (b) { return b.type === "toolCall"; });
    if (calls.length) {
      var tools = el("div", "tools");
      calls.forEach(function (call) { tools.appendChild(toolCall(call, results[String(call.id)])); });
      node.appendChild(tools);
    }
    var note = notice(message);
    if (note) node.appendChild(note);
    return node;
  }

  function messageItem(entry, links) {
    var message = entry.message || {};
    var role = message.role;
    var node;
    if (role === "user") {
      node = article(entry, "user", "You");
      node.appendChild(plainBody(contentText(message.content)));
      images(message.content, node, "Attached image");
      return node;
    }
    if (role === "assistant") return assistant(entry, message, links.results);
    if (role === "toolResult") {
      if (links.absorbed[entry.id]) return null;
      var extras = [el("span", "muted", message.toolName || "")];
      var code = facts.errorCodes[entry.id];
      if (code) extras.push(pill("error", code));
      node = article(entry, "tool-result" + (message.isError ? " is-error" : ""), "Tool result", extras);
      node.appendChild(el("pre", "output", clip(contentText(message.content))));
      return node;
    }
    if (role === "bashExecution") {
      var shellExtras = [];
      if (typeof message.exitCode === "number") shellExtras.push(el("span", "muted small", "exit " + message.exitCode));
      if (message.cancelled) shellExtras.push(pill("aborted", "cancelled"));
      var failed = message.cancelled || (typeof message.exitCode === "number" && message.exitCode !== 0);
      node = article(entry, "bash" + (failed ? " is-error" : ""), "Shell", shellExtras);
      var out = el("pre", "output");
      out.appendChild(el("span", "cmd", "$ " + (message.command || "")));
      out.appendChild(document.createTextNode("\n" + clip(message.output)));
      node.appendChild(out);
      return node;
    }
    if ((role === "custom" || role === "hookMessage") && message.display) {
      return custom(entry, message);
    }
    if (role === "system") return systemCard(entry, message);
    return null;
  }

  function names(tools) {
    return (Array.isArray(tools) ? tools : []).map(function (t) { return String((t && t.name) || ""); });
  }

  // A Pi 1.6 system message: the prompt sections it sets or removes, the tools it adds or removes.
  function systemCard(entry, message) {
    var card = el("details", "card system-message");
    card.id = "entry-" + entry.id;
    card.dataset.entry = entry.id;
    var sections = message.sections && typeof message.sections === "object" ? message.sections : {};
    var parts = Object.keys(sections).map(function (name) {
      return sections[name] === null ? name + " removed" : name;
    });
    var added = names(message.toolsAdded), removed = names(message.toolsRemoved);
    var title = " System prompt" + (parts.length ? ": " + parts.join(", ") : "");
    if (added.length) title += " · tools added: " + added.join(", ");
    if (removed.length) title += " · tools removed: " + removed.join(", ");
    var summary = el("summary");
    summary.appendChild(el("span", "card-icon", "⚙"));
    summary.appendChild(document.createTextNode(title));
    card.appendChild(summary);
    var inner = el("div", "card-body");
    var text = contentText(message.content);
    if (text) inner.appendChild(el("pre", "system-text", clip(text)));
    Object.keys(sections).forEach(function (name) {
      if (sections[name] === null) return;
      inner.appendChild(el("h4", "", name));
      inner.appendChild(el("pre", "system-text", clip(sections[name])));
    });
    card.appendChild(inner);
    return card;
  }

  function custom(entry, source) {
    var node = article(entry, "custom", "[" + (source.customType || "") + "]");
    node.appendChild(plainBody(contentText(source.content)));
    images(source.content, node, "Attached image");
    return node;
  }

  function compactionCard(entry, superseded, replaced, count) {
    var card = el("details", "card compaction" + (superseded ? " superseded" : ""));
    card.id = "entry-" + entry.id;
    card.dataset.entry = entry.id;
    var summary = el("summary");
    summary.appendChild(el("span", "card-icon", "⇣"));
    summary.appendChild(document.createTextNode(" Compacted from " + (Number(entry.tokensBefore) || 0).toLocaleString() + " tokens"));
    if (superseded) summary.appendChild(el("span", "muted small", " (superseded by a later compaction)"));
    if (count) summary.appendChild(el("span", "muted small", " · " + count + " earlier item" + (count === 1 ? "" : "s")));
    card.appendChild(summary);
    var inner = el("div", "card-body");
    inner.appendChild(el("h4", "", "Summary the model sees"));
    inner.appendChild(plainBody(entry.summary || "", "plain"));
    if (count) {
      var more = el("details", "replaced");
      more.appendChild(el("summary", "", "Show the " + count + " original item" + (count === 1 ? "" : "s")));
      var items = el("div", "replaced-items");
      items.appendChild(replaced);
      more.appendChild(items);
      inner.appendChild(more);
    }
    card.appendChild(inner);
    return card;
  }

  function entryItem(entry, links) {
    if (entry.type === "message") return messageItem(entry, links);
    if (entry.type === "compaction") return compactionCard(entry, true, null, 0);
    if (entry.type === "branch_summary" && entry.summary) {
      var card = el("details", "card branch-summary");
      card.id = "entry-" + entry.id;
      card.dataset.entry = entry.id;
      card.open = true;
      var summary = el("summary");
      summary.appendChild(el("span", "card-icon", "⤷"));
      summary.appendChild(document.createTextNode(" Summary of a branch left behind"));
      card.appendChild(summary);
      card.appendChild(plainBody(entry.summary, "card-body plain"));
      return card;
    }
    if (entry.type === "model_change") {
      var line = el("p", "divider", "Switched to " + (entry.provider || "") + "/" + (entry.modelId || ""));
      line.id = "entry-" + entry.id;
      return line;
    }
    if (entry.type === "custom_message" && entry.display) return custom(entry, entry);
    if (entry.type === "context_edit") {
      var edit = el("p", "divider context-edit");
      edit.id = "entry-" + entry.id;
      var replacement = entry.replacement;
      edit.appendChild(document.createTextNode("Context edit: " + (entry.targetId || "") + " "));
      edit.appendChild(document.createTextNode(replacement === null || replacement === undefined
        ? "is left out of later contexts"
        : "is replaced in later contexts by “" + contentText(replacement.content).slice(0, 120) + "”"));
      return edit;
    }
    if (entry.type === "usage") {
      var usage = entry.usage || {};
      var cost = usage.cost && typeof usage.cost.total === "number" ? usage.cost.total : 0;
      var used = el("p", "divider usage-entry", "Usage outside the conversation (" + (entry.kind || "") + ", " +
        (entry.provider || "") + "/" + (entry.model || "") + "): " + (Number(usage.totalTokens) || 0) +
        " tokens, $" + cost.toFixed(4));
      used.id = "entry-" + entry.id;
      return used;
    }
    return null;
  }

  // ---- a branch ----------------------------------------------------------------------

  function toolLinks(path) {
    var results = Object.create(null);
    var owners = Object.create(null);
    path.forEach(function (entry) {
      var message = entry.type === "message" ? entry.message || {} : {};
      if (message.role === "toolResult" && !(String(message.toolCallId) in results)) {
        results[String(message.toolCallId)] = entry;
      }
      if (message.role === "assistant" && Array.isArray(message.content)) {
        message.content.forEach(function (block) {
          if (block && block.type === "toolCall" && !(String(block.id) in owners)) owners[String(block.id)] = entry.id;
        });
      }
    });
    var absorbed = Object.create(null);
    Object.keys(results).forEach(function (callId) {
      if (callId in owners) absorbed[results[callId].id] = true;
    });
    Object.keys(results).forEach(function (callId) {
      if (!(callId in owners)) delete results[callId];
    });
    return { results: results, absorbed: absorbed };
  }

  function items(entries, links) {
    var fragment = document.createDocumentFragment();
    var count = 0;
    entries.forEach(function (entry) {
      var node = entryItem(entry, links);
      if (node) {
        fragment.appendChild(node);
        count++;
      }
    });
    return { fragment: fragment, count: count };
  }

  function firstKept(path, index) {
    var kept = path[index].firstKeptEntryId;
    for (var i = 0; i < index; i++) if (path[i].id === kept) return i;
    return index;
  }

  function drawChat(tip) {
    // Each latest compaction folds what it replaced into its card, level by level from the
    // end of the path, without recursion: a long session holds many chained compactions.
    var path = pathTo(tip);
    var links = toolLinks(path);
    var levels = [];
    var end = path.length;
    for (;;) {
      var at = -1;
      for (var i = end - 1; i >= 0; i--) if (path[i].type === "compaction") { at = i; break; }
      if (at < 0) break;
      var cut = firstKept(path, at);
      var compaction = path[at];
      levels.push({ compaction: compaction, visible: path.slice(cut, end).filter(function (e) { return e !== compaction; }) });
      end = cut;
    }
    var drawn = items(path.slice(0, end), links);
    for (var l = levels.length - 1; l >= 0; l--) {
      var card = compactionCard(levels[l].compaction, false, drawn.fragment, drawn.count);
      var rest = items(levels[l].visible, links);
      var fragment = document.createDocumentFragment();
      fragment.appendChild(card);
      fragment.appendChild(rest.fragment);
      drawn = { fragment: fragment, count: 1 + rest.count };
    }
    var chat = document.getElementById("chat");
    if (!chat) return path;
    chat.textContent = "";
    if (!path.length) chat.appendChild(el("p", "empty", "No messages on this branch."));
    chat.appendChild(drawn.fragment);
    return path;
  }

  // ---- the tree ------------------------------------------------------------------------

  function readJson(id, fallback) {
    var node = document.getElementById(id);
    if (!node) return fallback;
    try {
      return JSON.parse(node.textContent) || fallback;
    } catch (e) {
      return fallback;
    }
  }

  function short(text, size) {
    text = String(text || "");
    return text.length > size ? text.slice(0, size - 1) + "…" : text;
  }

  function chipText(type, role) {
    if (type === "compaction") return "compacted";
    if (type === "branch_summary") return "summary";
    if (role === "user") return "user";
    if (role === "assistant") return "agent";
    if (role === "toolResult") return "tool";
    if (role) return short(role, 6);
    var names = { label: "label", model_change: "model", thinking_level_change: "think", session_info: "name" };
    return names[type] || short(type, 8);
  }

  function drawTree() {
    // Rows as the tree projection laid them out: [id, depth, indent, connector, type, role,
    // text, label, newest leaf, children, descendants, on the path, current] (html_export).
    var data = readJson("tree-data", { drawnIndent: 24, rows: [] });
    var list = document.querySelector("#tree .tree-rows");
    if (!list) return;
    var fragment = document.createDocumentFragment();
    data.rows.forEach(function (r) {
      var id = r[0], indent = r[2], type = r[4], role = r[5], label = r[7], tip = r[8];
      var classes = ["node", "d" + Math.min(indent, data.drawnIndent), "t-" + type];
      if (role) classes.push("r-" + role);
      if (r[11]) classes.push("on-path");
      if (r[12]) classes.push("shown-leaf", "current");
      if (label) classes.push("labeled");
      var row = el("li", classes.join(" "));
      row.id = "node-" + id;
      row.dataset.id = id;
      row.dataset.depth = String(r[1]);
      if (indent > data.drawnIndent) {
        var deep = el("span", "deep", indent.toLocaleString());
        deep.title = indent + " levels in";
        row.appendChild(deep);
      }
      if (r[3]) {
        var conn = el("span", "conn" + (r[3] === 2 ? " last" : ""));
        conn.setAttribute("aria-hidden", "true");
        row.appendChild(conn);
      }
      if (r[9] > 1) {
        var fold = el("button", "fold js-only", "▾");
        fold.type = "button";
        fold.setAttribute("aria-expanded", "true");
        fold.title = "Fold the " + r[10] + " entries below";
        fold.dataset.fold = "";
        row.appendChild(fold);
      }
      var link = el("a", "node-text");
      link.href = "#leaf-" + tip;
      link.dataset.tip = tip;
      link.appendChild(el("span", "chip " + (role ? "r-" + role : "t-" + type), chipText(type, role)));
      link.appendChild(el("span", "text", r[6]));
      if (label) {
        var badge = el("span", "label-badge", label);
        badge.title = "Label";
        link.appendChild(badge);
      }
      if (r[12]) {
        var here = el("span", "here", "●");
        here.title = "The current leaf";
        link.appendChild(here);
      }
      row.appendChild(link);
      fragment.appendChild(row);
    });
    list.appendChild(fragment);
  }

  // ---- span details --------------------------------------------------------------------

  var spans = Object.create(null);
  readJson("span-data", []).forEach(function (s) { spans[s[0]] = s; });

  function pairs(list, emptyText) {
    var dl = el("dl", "pairs");
    list.forEach(function (pair) {
      dl.appendChild(el("dt", "", pair[0]));
      var dd = el("dd");
      if (pair[2]) dd.appendChild(el("pre", "", pair[1])); else dd.textContent = pair[1];
      dl.appendChild(dd);
    });
    if (!list.length && emptyText) dl.appendChild(el("dd", "muted", emptyText));
    return dl;
  }

  function fact(dl, term, value, className) {
    dl.appendChild(el("dt", "", term));
    var dd = el("dd", className || "", value);
    dl.appendChild(dd);
    return dd;
  }

  function drawSpan(target, s) {
    // [key, kind, name, status, start, start seq, duration, ttft, tokens, error, inputs,
    // outputs] (html_export), drawn as the pages' span details.
    target.textContent = "";
    var title = el("h3");
    title.appendChild(el("span", "kind", s[1]));
    title.appendChild(document.createTextNode(" " + s[2] + " "));
    title.appendChild(pill(s[3], s[3]));
    target.appendChild(title);
    var dl = el("dl", "facts");
    var start = fact(dl, "Start", s[4] + " ");
    start.appendChild(el("span", "muted", "(seq " + s[5] + ")"));
    fact(dl, "Duration", s[6]);
    if (s[7] !== null) fact(dl, "Time to first token", s[7]);
    if (s[8] !== null) fact(dl, "Tokens", s[8]);
    if (s[9]) fact(dl, "Error", s[9], "error-text");
    target.appendChild(dl);
    target.appendChild(el("h4", "", "Inputs"));
    target.appendChild(pairs(s[10]));
    target.appendChild(el("h4", "", "Outputs"));
    target.appendChild(pairs(s[11], "none yet"));
  }

  // ---- views, branches, spans ----------------------------------------------------------

  function showView(name) {
    document.querySelectorAll("[data-pane]").forEach(function (pane) {
      pane.hidden = pane.dataset.pane !== name;
    });
    document.querySelectorAll("[data-view-tab]").forEach(function (tab) {
      var on = tab.dataset.viewTab === name;
      tab.classList.toggle("active", on);
      if (on) tab.setAttribute("aria-current", "page"); else tab.removeAttribute("aria-current");
    });
    var view = document.getElementById("view");
    if (view) {
      view.dataset.view = name;
      view.className = "view view-" + name;
    }
  }

  function showBranch(tip) {
    var path = drawChat(tip);
    var shown = path.length ? path[path.length - 1].id : "";
    var note = document.getElementById("branch-note");
    if (note) note.hidden = shown === currentShown;
    var onPath = Object.create(null);
    path.forEach(function (entry) { onPath[entry.id] = true; });
    document.querySelectorAll("#tree .node").forEach(function (row) {
      row.classList.toggle("on-path", !!onPath[row.dataset.id]);
      row.classList.toggle("shown-leaf", row.dataset.id === shown);
    });
  }

  function showSpan(key) {
    var target = document.getElementById("span-detail");
    if (!target || !spans[key]) return;
    drawSpan(target, spans[key]);
    document.querySelectorAll(".span.selected").forEach(function (node) { node.classList.remove("selected"); });
    var link = document.querySelector('.span-name[data-span="' + CSS.escape(key) + '"]');
    if (link && link.closest(".span")) link.closest(".span").classList.add("selected");
  }

  document.addEventListener("click", function (evt) {
    var node = evt.target.closest ? evt.target : null;
    if (!node) return;
    var tab = node.closest("[data-view-tab]");
    if (tab) {
      evt.preventDefault();
      showView(tab.dataset.viewTab);
      return;
    }
    var tip = node.closest("a[data-tip]");
    if (tip) {
      evt.preventDefault();
      showBranch(tip.dataset.tip);
      showView("chat");
      return;
    }
    var span = node.closest("[data-span]");
    if (span) {
      evt.preventDefault();
      showSpan(span.dataset.span);
    }
  });

  drawTree();
  var drawnFirst = drawChat(currentLeaf);
  var currentShown = drawnFirst.length ? drawnFirst[drawnFirst.length - 1].id : "";

  var link = document.getElementById("download-jsonl");
  if (link) {
    if (piText) {
      link.href = URL.createObjectURL(new Blob([piText], { type: "application/x-ndjson" }));
    } else {
      link.hidden = true;
    }
  }
})();
