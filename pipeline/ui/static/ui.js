// The document view: hovering a drawn chunk shows what is stored for it; a click keeps it shown.
(function () {
  const data = document.getElementById("chunk-data");
  if (!data) return;
  const chunks = JSON.parse(data.textContent);
  const panel = document.getElementById("panel");
  const text = document.getElementById("text");
  let pinned = null;
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  function show(ids) {
    if (!ids.length) { panel.innerHTML = "<h3>Chunk</h3><p class='small'>In no chunk (whitespace between chunks).</p>"; return; }
    panel.innerHTML = ids.map((id) => {
      const c = chunks[id];
      const md = c.metadata || {};
      const page = md.page ? `<dt>page</dt><dd>${md.page}${md.page_end && md.page_end !== md.page ? "-" + md.page_end : ""}${md.ocr ? " (OCR)" : ""}</dd>` : "";
      return `<h3>Chunk ${c.id}</h3><dl>
        <dt>characters</dt><dd>${c.start}–${c.end} (${c.end - c.start})</dd>
        <dt>tokens</dt><dd>${c.tokens}</dd>
        <dt>section</dt><dd>${c.section} · chunk ${c.ordinal} of it</dd>
        <dt>heading path</dt><dd>${esc((c.heading_path || []).join(" > ") || "(top)")}</dd>${page}
        <dt>embedded context</dt><dd>${esc(c.context || "(none)")}</dd>
        <dt>full-text context</dt><dd>${esc(c.search_context || "(none)")}</dd>
        <dt>language</dt><dd>${esc(c.language || "no letters")}</dd>
        <dt>content hash</dt><dd>${esc(c.hash)}</dd>
        <dt>embedded-text hash</dt><dd>${esc(c.embed_hash)}</dd>
        <dt>last write</dt><dd>${c.written_last ? "re-chunked (new) in the document's last write" : "kept from an earlier run"}</dd>
      </dl>`;
    }).join("<hr>");
  }
  function mark(id, on) {
    text.querySelectorAll(".seg").forEach((s) => {
      if (s.dataset.chunks.split(" ").includes(String(id))) s.classList.toggle("sel", on);
    });
  }
  text.addEventListener("mouseover", (e) => {
    const s = e.target.closest(".seg");
    if (s && pinned === null) show(s.dataset.chunks ? s.dataset.chunks.split(" ") : []);
  });
  text.addEventListener("click", (e) => {
    const s = e.target.closest(".seg");
    if (!s) return;
    if (pinned !== null) mark(pinned, false);
    const ids = s.dataset.chunks ? s.dataset.chunks.split(" ") : [];
    pinned = ids.length ? ids[ids.length - 1] : null;
    if (pinned !== null) { mark(pinned, true); show([pinned]); }
  });
  const pin = document.body.dataset.pin;
  if (pin && chunks[pin]) { pinned = pin; mark(pin, true); show([pin]); }
  const first = text.querySelector(".seg.hl") || text.querySelector(".seg.sel");
  if (first) first.scrollIntoView({ block: "center" });
})();
