// xai-ray explain: one review's attention, every layer and head: a head view (tokens on both
// sides, a line per weight), a heatmap of the picked head and a model view of all heads.
// Data comes from the JSON element #xai-data; every label reaches the page through textContent.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("xai-data").textContent);
  const L = D.layers, H = D.heads;
  const ROW = 18, LEFT = 230, RIGHT = 390, WIDTH = 620;

  // Weights arrive as little-endian uint16 of sqrt(weight) (xai_ray.explain.encode).
  function decode(b64) {
    const bin = atob(b64), out = new Float32Array(bin.length / 2);
    for (let i = 0; i < out.length; i++) {
      const s = (bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8)) / 65535;
      out[i] = s * s;
    }
    return out;
  }
  const levels = {
    word: {labels: D.words, data: decode(D.word_attention)},
    token: {labels: D.tokens, data: decode(D.token_attention)},
  };
  const state = {layer: 0, head: -1, level: "word", focus: null, pinned: null};  // head -1: mean of heads
  const cache = new Map();

  // The (n x n) matrix of one head, or the mean of a layer's heads; rows are "from", columns "to".
  function matrix(level, layer, head) {
    const key = level + ":" + layer + ":" + head;
    if (cache.has(key)) return cache.get(key);
    const lv = levels[level], size = lv.labels.length * lv.labels.length;
    let out;
    if (head >= 0) {
      out = lv.data.subarray((layer * H + head) * size, (layer * H + head + 1) * size);
    } else {
      out = new Float32Array(size);
      for (let h = 0; h < H; h++) {
        const start = (layer * H + h) * size;
        for (let i = 0; i < size; i++) out[i] += lv.data[start + i] / H;
      }
    }
    cache.set(key, out);
    return out;
  }

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function shade(w) {  // white -> dark blue, by sqrt(weight) so faint patterns still show
    const t = Math.sqrt(Math.min(1, Math.max(0, w)));
    return [255 - t * 247, 255 - t * 207, 255 - t * 148];
  }

  function headName() {
    return "layer " + (state.layer + 1) + ", " + (state.head < 0 ? "mean of " + H + " heads" : "head " + (state.head + 1));
  }

  function buildControls() {
    const box = document.getElementById("controls");
    const layer = el("select", {id: "pick-layer"});
    for (let l = 0; l < L; l++) layer.appendChild(el("option", {value: String(l)}, "layer " + (l + 1)));
    const head = el("select", {id: "pick-head"});
    head.appendChild(el("option", {value: "-1"}, "mean of heads"));
    for (let h = 0; h < H; h++) head.appendChild(el("option", {value: String(h)}, "head " + (h + 1)));
    layer.addEventListener("change", () => { state.layer = Number(layer.value); render(); });
    head.addEventListener("change", () => { state.head = Number(head.value); render(); });
    const l1 = el("label", {}, "Layer "), l2 = el("label", {}, "Head ");
    l1.appendChild(layer);
    l2.appendChild(head);
    box.append(l1, l2);
    for (const name of ["word", "token"]) {
      const radio = el("input", {type: "radio", name: "level", value: name, id: "level-" + name});
      radio.checked = name === state.level;
      radio.addEventListener("change", () => {
        state.level = name; state.focus = state.pinned = null; buildTokens(); drawModelView(); render();
      });
      const label = el("label", {for: "level-" + name}, name === "word" ? " words" : " tokens");
      label.prepend(radio);
      box.appendChild(label);
    }
  }

  function syncControls() {
    document.getElementById("pick-layer").value = String(state.layer);
    document.getElementById("pick-head").value = String(state.head);
  }

  function buildTokens() {
    const box = document.getElementById("tokens");
    box.replaceChildren();
    levels[state.level].labels.forEach((label, i) => {
      const span = el("span", {"data-i": String(i)}, label);
      span.addEventListener("mouseenter", () => { state.focus = i; render(); });
      span.addEventListener("mouseleave", () => { state.focus = state.pinned; render(); });
      span.addEventListener("click", () => { state.pinned = state.pinned === i ? null : i; state.focus = state.pinned; render(); });
      box.appendChild(span);
    });
  }

  function drawHeadView(m, labels) {
    const n = labels.length, canvas = document.getElementById("head-view");
    canvas.width = WIDTH;
    canvas.height = n * ROW + 10;
    const g = canvas.getContext("2d");
    g.clearRect(0, 0, canvas.width, canvas.height);
    g.font = "13px system-ui, sans-serif";
    g.textBaseline = "middle";
    g.strokeStyle = "#2f6db5";
    const rows = state.focus === null ? [...Array(n).keys()] : [state.focus];
    for (const i of rows) {
      for (let j = 0; j < n; j++) {
        const w = m[i * n + j];
        if (w < 0.01) continue;  // hairlines only clutter
        g.globalAlpha = Math.min(1, w * (state.focus === null ? 1 : 1.5));
        g.lineWidth = state.focus === null ? 1.5 : 3;
        g.beginPath();
        g.moveTo(LEFT + 8, 5 + i * ROW + ROW / 2);
        g.lineTo(RIGHT - 8, 5 + j * ROW + ROW / 2);
        g.stroke();
      }
    }
    g.globalAlpha = 1;
    for (let i = 0; i < n; i++) {
      const y = 5 + i * ROW + ROW / 2;
      g.fillStyle = i === state.focus ? "#f58518" : "#222";
      g.textAlign = "right";
      g.fillText(labels[i].slice(0, 28), LEFT, y);
      const into = state.focus === null ? 0 : m[state.focus * n + i];
      g.fillStyle = into > 0.05 ? "#2f6db5" : "#222";
      g.textAlign = "left";
      g.fillText(labels[i].slice(0, 28), RIGHT, y);
    }
  }

  function drawHeatmap(m, labels) {
    const n = labels.length, cell = Math.max(2, Math.min(12, Math.floor(480 / n)));
    const canvas = document.getElementById("heatmap");
    canvas.width = canvas.height = n * cell;
    const g = canvas.getContext("2d");
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        const [r, gr, b] = shade(m[i * n + j]);
        g.fillStyle = "rgb(" + r + "," + gr + "," + b + ")";
        g.fillRect(j * cell, i * cell, cell, cell);
      }
    }
    canvas.onmousemove = (e) => {
      const i = Math.floor(e.offsetY / cell), j = Math.floor(e.offsetX / cell);
      if (i < n && j < n) {
        document.getElementById("cell").textContent =
          "from " + labels[i] + " to " + labels[j] + ": " + m[i * n + j].toFixed(4) + " (" + headName() + ")";
      }
    };
  }

  function describeFocus(m, labels) {
    const box = document.getElementById("focus");
    const n = labels.length;
    if (state.focus === null) {
      box.textContent = headName() + ": hover or click a token for where it looks. Heatmap: rows attend to columns.";
      return;
    }
    const targets = [...Array(n).keys()].sort((a, b) => m[state.focus * n + b] - m[state.focus * n + a]).slice(0, 8);
    box.replaceChildren(el("strong", {}, labels[state.focus]), document.createTextNode(" (" + headName() + ") looks at: "));
    const list = el("ol", {});
    for (const j of targets) list.appendChild(el("li", {}, labels[j] + "  " + m[state.focus * n + j].toFixed(3)));
    box.appendChild(list);
  }

  function drawModelView() {
    const box = document.getElementById("model-view");
    box.replaceChildren();
    box.style.gridTemplateColumns = "4em repeat(" + H + ", auto)";
    const labels = levels[state.level].labels, n = labels.length;
    box.appendChild(el("div", {class: "axis"}, ""));
    for (let h = 0; h < H; h++) box.appendChild(el("div", {class: "axis"}, "head " + (h + 1)));
    let drawn = 0;
    for (let l = 0; l < L; l++) {
      box.appendChild(el("div", {class: "axis"}, "layer " + (l + 1)));
      for (let h = 0; h < H; h++) {
        const canvas = el("canvas", {width: String(n), height: String(n), title: "layer " + (l + 1) + ", head " + (h + 1),
                                     "data-layer": String(l), "data-head": String(h)});
        canvas.style.width = canvas.style.height = "64px";
        const g = canvas.getContext("2d"), image = g.createImageData(n, n), m = matrix(state.level, l, h);
        for (let k = 0; k < n * n; k++) {
          const [r, gr, b] = shade(m[k]);
          image.data[4 * k] = r; image.data[4 * k + 1] = gr; image.data[4 * k + 2] = b; image.data[4 * k + 3] = 255;
        }
        g.putImageData(image, 0, 0);
        canvas.addEventListener("click", () => { state.layer = l; state.head = h; render(); });
        box.appendChild(canvas);
        drawn++;
      }
    }
    box.dataset.drawn = String(drawn);
  }

  function render() {
    syncControls();
    const labels = levels[state.level].labels, m = matrix(state.level, state.layer, state.head);
    for (const span of document.querySelectorAll("#tokens span")) {
      span.className = Number(span.dataset.i) === state.focus ? "on" : "";
    }
    for (const canvas of document.querySelectorAll("#model-view canvas")) {
      canvas.className = Number(canvas.dataset.layer) === state.layer && Number(canvas.dataset.head) === state.head ? "on" : "";
    }
    drawHeadView(m, labels);
    drawHeatmap(m, labels);
    describeFocus(m, labels);
  }

  buildControls();
  buildTokens();
  drawModelView();
  render();
  document.body.dataset.ready = "1";
}());
