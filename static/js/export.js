/* The script of an exported session file: switch views, show any branch from the tree,
   show span details, and offer the Pi session file. No network is used. */
(function () {
  "use strict";
  var body = document.body;
  var currentLeaf = body.dataset.leaf || "";

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
    var chat = document.getElementById("chat");
    var template = document.querySelector('template[data-chat="' + CSS.escape(tip) + '"]');
    if (!chat) return;
    if (template) {
      chat.innerHTML = template.innerHTML;
    } else {
      chat.innerHTML = '<p class="empty">This branch was not included in the export (too many branches).</p>';
    }
    var note = document.getElementById("branch-note");
    if (note) note.hidden = tip === currentLeaf;
    var onPath = {};
    var id = tip;
    var guard = 0;
    while (id && guard++ < 1000000) {
      onPath[id] = true;
      var row = document.getElementById("node-" + id);
      id = row ? row.dataset.parent : "";
    }
    document.querySelectorAll("#tree .node").forEach(function (row) {
      row.classList.toggle("on-path", !!onPath[row.dataset.id]);
      row.classList.toggle("shown-leaf", row.dataset.id === tip);
    });
    showView("chat");
  }

  function showSpan(key) {
    var target = document.getElementById("span-detail");
    var source = document.querySelector('[data-span-detail="' + CSS.escape(key) + '"]');
    if (!target || !source) return;
    target.innerHTML = source.innerHTML;
    document.querySelectorAll(".span.selected").forEach(function (el) { el.classList.remove("selected"); });
    var link = document.querySelector('.span-name[data-span="' + CSS.escape(key) + '"]');
    if (link && link.closest(".span")) link.closest(".span").classList.add("selected");
  }

  document.addEventListener("click", function (evt) {
    var el = evt.target.closest ? evt.target : null;
    if (!el) return;
    var tab = el.closest("[data-view-tab]");
    if (tab) {
      evt.preventDefault();
      showView(tab.dataset.viewTab);
      return;
    }
    var node = el.closest("a[data-tip]");
    if (node) {
      evt.preventDefault();
      showBranch(node.dataset.tip);
      return;
    }
    var span = el.closest("[data-span]");
    if (span) {
      evt.preventDefault();
      showSpan(span.dataset.span);
    }
  });

  var link = document.getElementById("download-jsonl");
  var data = document.getElementById("pi-jsonl");
  if (link && data) {
    try {
      var raw = atob(data.textContent.trim());
      var bytes = new Uint8Array(raw.length);
      for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
      link.href = URL.createObjectURL(new Blob([bytes], { type: "application/x-ndjson" }));
    } catch (e) {
      link.hidden = true;
    }
  }
})();
