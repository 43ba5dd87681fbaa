/* minitrain dashboard: draws the run data embedded in #dashboard-data with uPlot (vendored, inlined above).
 * Every panel comes from the panel registry in the data (number, title, y-axis unit); all panels share one
 * step axis: drag to zoom, wheel to zoom, shift+drag to pan, double-click to reset, a crosshair and a tooltip
 * with the values at the cursor, a legend whose entries hide/show a series, a smoothing slider, PNG/CSV
 * export, and a run chooser (the runs embedded in the page, plus any other dashboard.html opened from disk).
 * Every string from the data reaches the screen through textContent, never as HTML. Nothing is fetched.
 * Sets window.__dashboardReady = true once the first screen is drawn (panels further down are drawn as they
 * come near the screen); window.__dashboard exposes the plots (and drawAll) for the tests. */
(function () {
  'use strict';

  var D = JSON.parse(document.getElementById('dashboard-data').textContent);
  var ME = D.runs[0], CFG = D.config || {};
  var PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd'];
  var BASE = '#8d96a3';  // the baseline run: grey
  var OTHER = ['#c2185b', '#00897b', '#9c6500', '#455a64', '#6a1b9a', '#2e7d32'];  // compared runs
  var MARK = { k: '#d1242f', warmup: '#8a93a0', nonfinite: '#000000', end: '#bf5700', diagnosis: '#8250df' };
  var state = { smooth: D.smoothing, x: null, full: [0, 1], shown: {}, extra: [], syncing: false };
  var plots = [];  // {spec, u, root, log}

  // ---- helpers ---------------------------------------------------------------------------------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function isNum(v) { return typeof v === 'number' && isFinite(v); }
  function fmt(v, p) {
    if (v === null || v === undefined) return '\u2014';
    if (typeof v !== 'number') return String(v);
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential((p || 5) - 1).replace('e+', 'e');
    return String(+v.toPrecision(p || 5));
  }
  function tick(v) {  // an axis label: short, no trailing zeros
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(2).replace(/\.?0+e/, 'e').replace('e+', 'e');
    return String(+v.toPrecision(4));
  }
  function logTicks(u, vals) {  // label 1, 2 and 5 of each decade (only 1 over many decades); others unlabelled
    var sc = u.scales.y, decades = Math.log10(sc.max / sc.min);
    return vals.map(function (v) {
      var m = Math.round(v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9)));
      return (m === 1 || (decades <= 3 && (m === 2 || m === 5))) ? tick(v) : '';
    });
  }
  function color(i) { return PALETTE[i % PALETTE.length]; }
  function runColor(run, i) { return run.role === 'baseline' ? BASE : OTHER[i % OTHER.length]; }
  function pairs(list) {
    return { x: list.map(function (p) { return p[0]; }), y: list.map(function (p) { return p[1]; }) };
  }
  // exponential moving average, debiased like TensorBoard's, skipping missing values
  function ema(ys, w) {
    var m = 0, n = 0, out = new Array(ys.length);
    for (var i = 0; i < ys.length; i++) {
      if (!isNum(ys[i])) { out[i] = null; continue; }
      n += 1; m = w * m + (1 - w) * ys[i];
      out[i] = m / (1 - Math.pow(w, n));
    }
    return out;
  }
  function download(name, blob) {
    var a = el('a'); a.href = URL.createObjectURL(blob); a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(function () { URL.revokeObjectURL(a.href); }, 1000);
  }
  function safeName(s) { return String(s).replace(/[^A-Za-z0-9._-]+/g, '_'); }

  // ---- what each registry panel draws, per run ----------------------------------------------------
  // A series: {label, x, y, color, width, dash, smooth (raw + EMA), sparse (points, bridged), run}
  function S(label, x, y, colr, o) {
    var s = { label: label, x: x, y: y, color: colr, width: 1.4 };
    for (var k in o || {}) s[k] = o[k];
    return s;
  }
  function runSeries(key, run, i) {
    var se = run.series, x = run.steps, own = run === ME, c = own ? null : runColor(run, i);
    var pre = own ? '' : run.name + ': ';
    var out = [];
    if (key === 'loss') {
      out.push(S(pre + 'train loss', x, se.loss, c || '#1a5fb4', { smooth: true }));
      var v = pairs(se.val);
      out.push(S(pre + 'validation', v.x, v.y, c || '#e66100', { sparse: true, width: 1.6 }));
    } else if (key === 'lr') {
      out.push(S(pre + 'learning rate', x, se.lr, c || '#1a5fb4'));
    } else if (key === 'grad') {
      out.push(S(pre + 'before clipping', x, se.grad_norm, c || '#1a5fb4'));
      if (own) out.push(S('after clipping', x, se.grad_norm_clipped, '#2da44e', { width: 1.6 }));
    } else if (key === 'act') {
      se.act.forEach(function (y, l) { out.push(S(pre + 'layer ' + l, x, y, c || color(l), { dash: c && l ? [5, 3] : null })); });
    } else if (key === 'classes') {
      out.push(S(pre + 'regular verbs', x, se.loss_regular, c || '#1a7f37', { smooth: true }));
      out.push(S(pre + 'irregular verbs', x, se.loss_irregular, c || '#8250df', { smooth: true, dash: c ? [5, 3] : null }));
    } else if (key === 'logits') {
      out.push(S(pre + 'max |logit|', x, se.logit_max, c || '#9467bd'));
    } else if (key === 'batch-shares' && own) {
      var bs = CFG.batch_size || 1;
      out.push(S('duplicated rows / batch size', x, se.batch.dup_rows.map(function (v) { return isNum(v) ? v / bs : null; }), '#000000'));
      out.push(S('rare-token share', x, se.batch.rare_share, '#e66100'));
      out.push(S('largest single-token share', x, se.batch.top_token_share, '#1a5fb4'));
    } else if (key === 'batch-counts' && own) {
      out.push(S('distinct tokens in the batch', x, se.batch.distinct_tokens, '#1a5fb4'));
    }
    return out;
  }
  function diffSeries(key) {
    var out = [];
    D.diffs.forEach(function (d, i) {
      var own = d.name === ME.name, c = own ? '#8250df' : OTHER[i % OTHER.length], pre = own ? '' : d.name + ': ';
      if (!state.shown[d.name]) return;
      if (key === 'diff-loss') {
        out.push(S(pre + 'train loss difference', d.steps, d.loss, c));
        out.push(S(pre + 'validation difference', d.val_steps, d.val_loss, own ? '#e66100' : c, { sparse: true }));
      } else out.push(S(pre + 'pre-clip grad norm difference', d.steps, d.grad_norm, c));
    });
    return out;
  }
  var tensorPick = {};  // panel key -> '' (movers), '*' (all) or a tensor index
  function tensorSeries(stat) {
    var PT = ME.per_tensor, mv = D.movers[stat] || [], pick = tensorPick[stat] || '';
    var idx = mv.map(function (m) { return m.index; });
    if (pick === '*') idx = PT.names.map(function (_, i) { return i; });
    else if (pick !== '' && idx.indexOf(+pick) < 0) idx.push(+pick);
    return idx.map(function (i) {
      var m = mv.filter(function (q) { return q.index === i; })[0];
      // span: statistics measured on detail steps only (telemetry's schedule) are joined across the steps between
      return S(PT.names[i] + (m ? ' (x' + fmt(m.factor, 3) + ' its 50-step median, step ' + m.step + ')' : ''), ME.steps,
               PT.stats[stat][i], color(i), { span: true });
    });
  }
  function sigmaSeries() {
    var sg = ME.per_tensor.sigma;
    return sg.names.map(function (n, i) {
      var gi = ME.per_tensor.names.indexOf(n);
      return S(n, sg.steps, sg.values[i], color(gi < 0 ? i : gi), { sparse: true });
    });
  }
  function checkSeries(key) {
    var sg = D.checks.signals;
    if (key === 'v-factor') return [S('f of the tensor farthest from 1', sg.steps, sg.v_factor, '#8250df')];
    return [S('smallest over tensors (\u00a77.1)', sg.steps, sg.g_all_up, '#1a5fb4'),
            S('largest over tensors (\u00a77.2)', sg.steps, sg.g_all_down, '#e66100')];
  }
  function seriesFor(spec) {
    var sig = spec.signals[0];
    if (sig.indexOf('params.') === 0) return tensorSeries(sig.slice(7));
    if (spec.key === 'sigma') return sigmaSeries();
    if (sig.indexOf('baseline.') === 0) return diffSeries(spec.key);
    if (sig.indexOf('check.') === 0) return checkSeries(spec.key);
    var out = [];
    visibleRuns().forEach(function (run, i) {
      if (run !== ME) out = out.concat(runSeries(spec.key, run, i));
    });
    return out.concat(runSeries(spec.key, ME, 0));  // this run last: on top
  }
  function allRuns() { return D.runs.concat(state.extra); }
  function visibleRuns() { return allRuns().filter(function (r) { return state.shown[r.name]; }); }

  // reference lines (drawn under the data, labelled in the legend, never on the plot)
  function hlines(spec) {
    var out = [];
    if (spec.key === 'loss') {
      if (isNum(D.ngram_val_loss)) out.push({ y: D.ngram_val_loss, label: 'n-gram val loss ' + fmt(D.ngram_val_loss, 4), color: '#333333', dash: [7, 4] });
      var v = CFG.vocab_size || 512;
      out.push({ y: Math.log(v), label: 'ln ' + v + ' = ' + fmt(Math.log(v), 4) + ' (untrained)', color: '#8a93a0', dash: [2, 3] });
    }
    if (spec.key === 'grad' && isNum(CFG.grad_clip) && CFG.grad_clip > 0) out.push({ y: CFG.grad_clip, label: 'clip threshold ' + CFG.grad_clip, color: '#cf222e', dash: [6, 3] });
    if (spec.key.indexOf('diff-') === 0) {
      out.push({ y: 0, label: 'zero', color: '#888888', dash: [], nolegend: true });
      var r = roundingOf(spec.key);
      if (r && r.within) {
        out.push({ y: r.bound, label: 'float32 rounding bound \u00b1' + fmt(r.bound, 2), color: '#2da44e', dash: [3, 3] });
        out.push({ y: -r.bound, label: '', color: '#2da44e', dash: [3, 3], nolegend: true });
      }
    }
    var sg = D.checks ? D.checks.signals : {};
    if (spec.key === 'v-factor' && sg.v_factor_band) {
      var b = sg.v_factor_band, nz = sg.v_factor_noise;
      out.push({ y: b[1], label: '\u00a76.1 bounds x' + fmt(b[0], 6) + ' .. x' + fmt(b[1], 6), color: '#cf222e', dash: [6, 3] });
      out.push({ y: b[0], label: '', color: '#cf222e', dash: [6, 3], nolegend: true });
      out.push({ y: nz[1], label: 'rounding noise of this run (99th percentile) x' + fmt(nz[0], 6) + ' .. x' + fmt(nz[1], 6), color: '#2da44e', dash: [3, 3] });
      out.push({ y: nz[0], label: '', color: '#2da44e', dash: [3, 3], nolegend: true });
    }
    if (spec.key === 'g-all' && sg.g_all_thresholds) {
      out.push({ y: sg.g_all_thresholds[1], label: '\u00a77.1 threshold ' + sg.g_all_thresholds[1] + 'x', color: '#cf222e', dash: [6, 3] });
      out.push({ y: sg.g_all_thresholds[0], label: '\u00a77.2 threshold ' + sg.g_all_thresholds[0] + 'x', color: '#9a6700', dash: [6, 3] });
    }
    return out;
  }
  function roundingOf(key) {
    var d = D.diffs[0];
    if (!d) return null;
    return key === 'diff-loss' ? d.rounding.loss : d.rounding.grad_norm;
  }

  // ---- one aligned data table per panel ------------------------------------------------------------
  function build(spec, log) {
    var list = seriesFor(spec), xsSet = {}, xs = [];
    list.forEach(function (s) { s.x.forEach(function (x) { if (!xsSet[x]) { xsSet[x] = true; xs.push(x); } }); });
    xs.sort(function (a, b) { return a - b; });
    var pos = {}; xs.forEach(function (x, i) { pos[x] = i; });
    var data = [xs], series = [{ label: 'step' }], meta = [null];
    function column(s, y) {
      var col = new Array(xs.length).fill(null);
      for (var i = 0; i < s.x.length; i++) {
        var v = y[i];
        if (isNum(v) && !(log && v <= 0)) col[pos[s.x[i]]] = v;
      }
      return col;
    }
    list.forEach(function (s) {
      var smoothOn = s.smooth && state.smooth > 0;
      if (smoothOn) {  // the raw line faded under its smoothed line, as TensorBoard draws it
        data.push(column(s, s.y));
        series.push({ label: s.label + ' (raw)', stroke: fade(s.color), width: 1, spanGaps: false, points: { show: false } });
        meta.push({ raw: true, of: s });
        data.push(column(s, ema(s.y, state.smooth)));
        series.push({ label: s.label + ' (smoothed ' + state.smooth.toFixed(2) + ')', stroke: s.color, width: 2,
                      dash: s.dash || undefined, spanGaps: true, points: { show: false } });
        meta.push({ smoothed: true, of: s });
      } else {
        data.push(column(s, s.y));
        series.push({ label: s.label, stroke: s.color, width: s.width, dash: s.dash || undefined, spanGaps: !!(s.sparse || s.span),
                      points: s.sparse ? { show: true, size: 5, fill: s.color } : { show: false } });
        meta.push({ of: s });
      }
    });
    return { data: data, series: series, meta: meta };
  }
  function fade(hex) {  // the colour at 35% on white
    var n = parseInt(hex.slice(1), 16), r = n >> 16, g = (n >> 8) & 255, b = n & 255;
    function f(c) { return Math.round(255 - (255 - c) * 0.35); }
    return 'rgb(' + f(r) + ',' + f(g) + ',' + f(b) + ')';
  }

  // ---- plugins: markers + reference lines, tooltip, wheel zoom and pan ------------------------------
  function decorations(spec, refs) {
    function drawLines(u) {  // under the series
      var ctx = u.ctx, bb = u.bbox, px = uPlot.pxRatio;
      ctx.save();
      ctx.beginPath(); ctx.rect(bb.left, bb.top, bb.width, bb.height); ctx.clip();
      refs.forEach(function (l) {
        if (u.scales.y.distr === 3 && l.y <= 0) return;
        var y = u.valToPos(l.y, 'y', true);
        ctx.strokeStyle = l.color; ctx.lineWidth = 1.3 * px; ctx.setLineDash((l.dash || []).map(function (d) { return d * px; }));
        ctx.beginPath(); ctx.moveTo(bb.left, y); ctx.lineTo(bb.left + bb.width, y); ctx.stroke();
      });
      if (spec.key === 'grad') {  // the clipping strip: one mark per clipped step, along the bottom
        ctx.setLineDash([]); ctx.fillStyle = 'rgba(240,136,62,0.85)';
        var cl = ME.series.clipped, st = ME.steps;
        for (var i = 0; i < st.length; i++) {
          if (!cl[i] || st[i] < u.scales.x.min || st[i] > u.scales.x.max) continue;
          var a = u.valToPos(st[i] - 0.5, 'x', true), b = u.valToPos(st[i] + 0.5, 'x', true);
          ctx.fillRect(a, bb.top + bb.height - 5 * px, Math.max(px, b - a), 5 * px);
        }
      }
      (D.markers || []).forEach(function (mk) {
        if (mk.step < u.scales.x.min || mk.step > u.scales.x.max) return;
        var x = u.valToPos(mk.step, 'x', true);
        ctx.strokeStyle = MARK[mk.kind] || '#555'; ctx.globalAlpha = 0.65; ctx.lineWidth = 1.4 * px;
        ctx.setLineDash(mk.kind === 'k' ? [] : [4 * px, 3 * px]);
        ctx.beginPath(); ctx.moveTo(x, bb.top); ctx.lineTo(x, bb.top + bb.height); ctx.stroke();
        ctx.globalAlpha = 1;
      });
      ctx.restore();
    }
    function drawLabels(u) {  // marker labels in the band above the plot area: no line crosses them
      var ctx = u.ctx, bb = u.bbox, px = uPlot.pxRatio, rows = [];
      ctx.save();
      ctx.font = 'bold ' + Math.round(10.5 * px) + 'px system-ui, sans-serif'; ctx.textBaseline = 'bottom'; ctx.textAlign = 'left';
      (D.markers || []).forEach(function (mk) {
        if (mk.step < u.scales.x.min || mk.step > u.scales.x.max) return;
        var text = spec.key === 'loss' || spec.key === 'grad' ? mk.label : mk.short;
        var x = u.valToPos(mk.step, 'x', true), w = ctx.measureText(text).width;
        var left = Math.min(Math.max(x - w / 2, bb.left), bb.left + bb.width - w);
        var row = 0;
        while (rows[row] !== undefined && rows[row] > left - 6 * px) row++;
        if (row > 1) return;  // two rows of labels at most; the tooltip still names the marker
        rows[row] = left + w;
        ctx.fillStyle = MARK[mk.kind] || '#555';
        ctx.fillText(text, left, bb.top - (2 + 12 * (1 - row)) * px);
      });
      ctx.restore();
    }
    return { hooks: { drawClear: [drawLines], draw: [drawLabels] } };
  }

  function tooltip(p) {
    var tip;
    function init(u) { tip = el('div', 'tooltip'); tip.style.display = 'none'; u.over.appendChild(tip); }
    function setCursor(u) {
      var i = u.cursor.idx;
      if (i === null || i === undefined || u.cursor.left < 0) { tip.style.display = 'none'; return; }
      var step = u.data[0][i], rows = [];
      for (var k = 1; k < u.series.length; k++) {
        var s = u.series[k];
        if (!s.show) continue;
        var v = u.data[k][i], at = step;
        var m = p.meta[k];
        if (!isNum(v) && m && m.of && (m.of.sparse || m.of.span)) {  // a sampled series: its value at or before the cursor
          for (var j = i; j >= 0; j--) if (isNum(u.data[k][j])) { v = u.data[k][j]; at = u.data[0][j]; break; }
        }
        if (!isNum(v)) continue;
        rows.push({ label: s.label, v: v, at: at, color: s.stroke });
      }
      rows.sort(function (a, b) { return b.v - a.v; });
      tip.textContent = '';
      tip.appendChild(el('div', 'tstep', 'step ' + step));
      (D.markers || []).forEach(function (mk) { if (mk.step === step) tip.appendChild(el('div', 'tmark', mk.label)); });
      rows.forEach(function (r) {
        var line = el('div', 'trow'), sw = el('span', 'tsw');
        sw.style.background = typeof r.color === 'function' ? r.color(u, 1) : r.color;
        line.appendChild(sw);
        line.appendChild(el('span', 'tval', fmt(r.v, 6)));
        line.appendChild(el('span', 'tlab', ' ' + r.label + (r.at !== step ? ' @' + r.at : '')));
        tip.appendChild(line);
      });
      tip.style.display = 'block';
      var w = tip.offsetWidth, h = tip.offsetHeight, ow = u.over.clientWidth, oh = u.over.clientHeight;
      var x = u.cursor.left + 14, y = u.cursor.top + 14;
      if (x + w > ow) x = u.cursor.left - w - 14;
      if (y + h > oh) y = Math.max(0, oh - h);
      tip.style.left = Math.max(0, x) + 'px'; tip.style.top = y + 'px';
    }
    return { hooks: { init: [init], setCursor: [setCursor] } };
  }

  function wheelAndPan() {
    function init(u) {
      u.over.addEventListener('wheel', function (e) {
        e.preventDefault();
        var r = u.over.getBoundingClientRect(), at = u.posToVal(e.clientX - r.left, 'x');
        var a = u.scales.x.min, b = u.scales.x.max, f = e.deltaY < 0 ? 0.8 : 1.25;
        zoomTo(at - (at - a) * f, at + (b - at) * f);
      }, { passive: false });
      u.root.addEventListener('mousedown', function (e) {  // shift+drag pans (before uPlot's drag-zoom sees it)
        if (!e.shiftKey || e.button !== 0 || !u.over.contains(e.target)) return;
        e.stopPropagation(); e.preventDefault();
        var x0 = e.clientX, a = u.scales.x.min, b = u.scales.x.max, per = (b - a) / u.over.clientWidth;
        function move(ev) {
          var d = (ev.clientX - x0) * per, lo = a - d, hi = b - d;
          if (lo < state.full[0]) { hi += state.full[0] - lo; lo = state.full[0]; }
          if (hi > state.full[1]) { lo -= hi - state.full[1]; hi = state.full[1]; }
          zoomTo(lo, hi);
        }
        function up() { window.removeEventListener('mousemove', move); window.removeEventListener('mouseup', up); }
        window.addEventListener('mousemove', move); window.addEventListener('mouseup', up);
      }, true);
    }
    return { hooks: { init: [init] } };
  }

  // ---- panels ------------------------------------------------------------------------------------
  function yRange(p) {
    return function (u, lo, hi) {
      if (p.spec.key.indexOf('diff-') === 0) {  // a difference panel: never magnify float rounding
        var r = roundingOf(p.spec.key), m = Math.max(Math.abs(lo || 0), Math.abs(hi || 0));
        if (r && r.within) m = Math.max(m, r.bound) * 1.15;
        if (!(m > 0)) m = 1;
        return [-m * 1.05, m * 1.05];
      }
      if (p.log) {
        if (!(lo > 0)) return [0.1, 1];
        return uPlot.rangeLog(lo, hi, 10, true);  // whole decades: uPlot's log ticks need them
      }
      if (lo === null || hi === null) return [0, 1];
      var zero = ['lr', 'grad', 'batch-shares'].indexOf(p.spec.key) >= 0;
      if (zero) lo = Math.min(0, lo);
      var span = hi - lo || Math.abs(hi) * 0.1 || 1;
      return [zero && lo === 0 ? 0 : lo - span * 0.05, hi + span * 0.05];
    };
  }
  function width(p) { return Math.max(280, p.box.clientWidth); }

  function makePlot(p) {
    p.drawn = true;
    p.box.style.minHeight = '';
    if (p.u) { p.u.destroy(); p.u = null; }
    var t = build(p.spec, p.log);
    p.meta = t.meta;
    p.refs = hlines(p.spec);
    p.box.textContent = '';
    var empty = t.data.length < 2 || t.data[0].length === 0;
    p.empty.textContent = empty ? (p.spec.key === 'batch-shares' || p.spec.key === 'batch-counts' ? 'no batch data'
                                   : 'no data for this panel in this run') : '';
    p.note.textContent = noteFor(p.spec);
    if (empty) return;
    var opts = {
      width: width(p), height: p.spec.key === 'loss' || p.spec.key === 'grad' ? 300 : 230,
      padding: [D.markers && D.markers.length ? 28 : 10, 14, 0, 0],
      cursor: { sync: { key: 'minitrain', setSeries: false }, drag: { x: true, y: false, setScale: false },
                points: { size: 6 } },
      select: { show: true },
      legend: { live: false },
      scales: { x: { time: false, range: function () { return state.x || state.full; } },
                y: p.log ? { distr: 3, log: 10, range: yRange(p) } : { range: yRange(p) } },
      axes: [{ label: 'step', labelSize: 18, size: 34 },
             { label: p.spec.unit + (p.log ? ' (log)' : ''), labelSize: 18, size: 64,
               values: p.log ? logTicks : function (u, vals) { return vals.map(tick); } }],
      series: t.series,
      plugins: [decorations(p.spec, p.refs), tooltip(p), wheelAndPan()],
      hooks: {
        setSelect: [function (u) {
          if (u.select.width > 4) zoomTo(u.posToVal(u.select.left, 'x'), u.posToVal(u.select.left + u.select.width, 'x'));
          u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
        }],
      },
    };
    p.u = new uPlot(opts, t.data, p.box);
    p.u.over.addEventListener('dblclick', function () { zoomTo(state.full[0], state.full[1]); });
    p.root.setAttribute('data-x0', String(state.x ? state.x[0] : state.full[0]));
    p.root.setAttribute('data-x1', String(state.x ? state.x[1] : state.full[1]));
    refLegend(p);
  }
  function refLegend(p) {  // reference lines are legend entries of their own, not labels on the plot
    var at = p.u.root.querySelector('.u-legend');
    p.refs.forEach(function (l) {
      if (l.nolegend || !at) return;
      var item = el('span', 'refitem'), sw = el('span', 'refsw');
      sw.style.borderTopColor = l.color; sw.style.borderTopStyle = l.dash && l.dash.length ? 'dashed' : 'solid';
      item.appendChild(sw); item.appendChild(document.createTextNode(l.label));
      at.parentNode.insertBefore(item, at.nextSibling);
      at = item;
    });
  }
  function noteFor(spec) {
    if (spec.key.indexOf('diff-') === 0) {
      var d = D.diffs[0], r = roundingOf(spec.key), fd = d.first_difference, first = ME.steps[0];
      var txt = ME.name + ' minus ' + d.baseline + ', step by step: ' + (fd === null ? 'identical at every shared step' :
        fd > first ? 'exactly 0 for steps ' + first + '\u2013' + (fd - 1) + ' (shared trunk); first difference at step ' + fd : 'differs from the first shared step');
      if (r && r.within) txt = 'identical up to float rounding: the largest |\u0394| is ' + fmt(r.max_abs, 3) +
        ', below the float32 rounding bound (' + fmt(r.bound, 3) + ' = 32 ulps of the value). ' + txt;
      return txt;
    }
    if (spec.signals[0].indexOf('params.') === 0) return 'shown: the ' + (D.movers[spec.signals[0].slice(7)] || []).length +
      ' tensors that move most (x = largest ratio to the median of their own previous 50 steps, ' + D.movers_rule + '); the selector adds any tensor';
    if (spec.key === 'grad') {
      var n = 0, tot = 0;
      ME.series.clipped.forEach(function (c, i) { if (isNum(ME.series.grad_norm[i])) { tot++; n += c; } });
      return 'global L2 norm every step (not aggregated); orange marks along the bottom: clipping engaged (' + n + ' of ' + tot + ' steps)';
    }
    if (spec.key === 'v-factor') return '\u00a76.1: Adam obeys v_t = \u03b22\u00b7v_(t-1) + (1-\u03b22)\u00b7g_t\u00b2; f is the factor by which a tensor\u2019s v moved beyond that (\u03b22 fitted from the run: ' + D.checks.signals.v_factor_beta2 + '), for the tensor farthest from 1 at each step';
    if (spec.key === 'g-all') return '\u00a77.1 / \u00a77.2: each tensor\u2019s gradient norm over its own 50-step trailing median, the batch loss\u2019s own jump divided out; every tensor jumped when even the smallest ratio is high (and fell when even the largest is low)';
    return '';
  }

  function panelControls(p, ctl) {
    var stat = p.spec.signals[0].indexOf('params.') === 0 ? p.spec.signals[0].slice(7) : null;
    if (stat && ME.per_tensor) {
      var sel = el('select'); sel.title = 'add any tensor to the plot';
      var o0 = el('option', '', 'movers only'); o0.value = ''; sel.appendChild(o0);
      var oa = el('option', '', 'all ' + ME.per_tensor.names.length + ' tensors'); oa.value = '*'; sel.appendChild(oa);
      ME.per_tensor.names.forEach(function (n, i) { var op = el('option', '', '+ ' + n); op.value = String(i); sel.appendChild(op); });
      sel.addEventListener('change', function () { tensorPick[stat] = sel.value; makePlot(p); });
      ctl.appendChild(sel);
    }
    if (p.spec.key.indexOf('diff-') < 0) {
      var lb = el('button', p.log ? 'on' : '', 'log y'); lb.title = 'switch the y axis between linear and log scale';
      lb.addEventListener('click', function () { p.log = !p.log; lb.className = p.log ? 'on' : ''; makePlot(p); });
      ctl.appendChild(lb);
    }
    var png = el('button', 'export-png', 'PNG'); png.title = 'save this panel as a PNG image';
    png.addEventListener('click', function () { exportPng(p); });
    var csv = el('button', 'export-csv', 'CSV'); csv.title = 'save the data drawn in this panel as CSV';
    csv.addEventListener('click', function () { exportCsv(p); });
    ctl.appendChild(png); ctl.appendChild(csv);
  }
  function exportPng(p) {
    if (!p.u) return;
    var src = p.u.ctx.canvas, px = uPlot.pxRatio, head = Math.round(24 * px);
    var c = document.createElement('canvas'); c.width = src.width; c.height = src.height + head;
    var ctx = c.getContext('2d');
    ctx.fillStyle = '#ffffff'; ctx.fillRect(0, 0, c.width, c.height);
    ctx.fillStyle = '#1d2430'; ctx.font = 'bold ' + Math.round(13 * px) + 'px system-ui, sans-serif';
    ctx.fillText(p.spec.number + '. ' + p.spec.title + ' \u2014 ' + D.name, 8 * px, 17 * px);
    ctx.drawImage(src, 0, head);
    c.toBlob(function (b) { download(safeName(D.name) + '-panel' + p.spec.number + '-' + p.spec.key + '.png', b); }, 'image/png');
  }
  function exportCsv(p) {
    if (!p.u) return;
    var u = p.u, cols = u.series.map(function (s, k) { return k === 0 ? 'step' : s.label; });
    var q = function (s) { s = String(s); return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; };
    var lines = [cols.map(q).join(',')];
    for (var i = 0; i < u.data[0].length; i++) {
      lines.push(u.data.map(function (col) { return col[i] === null || col[i] === undefined ? '' : String(col[i]); }).join(','));
    }
    download(safeName(D.name) + '-panel' + p.spec.number + '-' + p.spec.key + '.csv', new Blob([lines.join('\n') + '\n'], { type: 'text/csv' }));
  }

  function wanted(spec) {
    if (spec.needs === 'baseline') return D.diffs.length > 0;
    if (spec.needs === 'params') {
      if (!ME.per_tensor) return false;
      if (spec.key === 'sigma') return ME.per_tensor.sigma.names.length > 0;
      if (spec.key === 'v-factor') return !!(D.checks && D.checks.signals.v_factor);
      if (spec.key === 'g-all') return !!(D.checks && D.checks.signals.g_all_up);
    }
    return true;
  }

  function buildPanels(grid) {
    D.panels.forEach(function (spec) {
      if (!wanted(spec)) return;
      var p = { spec: spec, log: spec.log, u: null };
      var root = p.root = el('div', 'panel' + (spec.key === 'loss' || spec.key === 'grad' ? ' wide' : ''));
      root.id = 'panel-' + spec.key; root.setAttribute('data-panel', String(spec.number));
      var head = el('div', 'phead');
      head.appendChild(el('h2', 'ptitle', spec.number + '. ' + spec.title));
      var ctl = el('div', 'ctl'); panelControls(p, ctl); head.appendChild(ctl);
      root.appendChild(head);
      p.note = el('div', 'sub'); root.appendChild(p.note);
      p.box = el('div', 'plot'); root.appendChild(p.box);
      p.box.style.minHeight = (spec.key === 'loss' || spec.key === 'grad' ? 360 : 290) + 'px';  // until drawn
      p.empty = el('div', 'empty'); root.appendChild(p.empty);
      grid.appendChild(root);
      plots.push(p);
    });
  }

  function zoomTo(a, b) {  // every drawn panel now; the others read state.x when they are drawn
    a = Math.max(state.full[0], a); b = Math.min(state.full[1], b);
    if (b - a < 2) { var c = (a + b) / 2; a = Math.max(state.full[0], c - 1); b = Math.min(state.full[1], a + 2); }
    var full = a <= state.full[0] && b >= state.full[1];
    state.x = full ? null : [a, b];
    plots.forEach(function (p) {
      if (!p.u) return;
      p.u.setScale('x', { min: a, max: b });
      p.root.setAttribute('data-x0', String(Math.round(a))); p.root.setAttribute('data-x1', String(Math.round(b)));
    });
    var z = document.getElementById('zoom-range');
    if (z) z.textContent = 'steps ' + Math.round(a) + '\u2013' + Math.round(b);
  }
  // Panels are drawn when they come near the screen (an IntersectionObserver), so the first screen is ready
  // without drawing all of them; drawAll() draws every one (the tests and screenshots use it).
  function redrawAll() { plots.forEach(function (p) { if (p.drawn) makePlot(p); }); }
  function drawAll() { plots.forEach(function (p) { if (!p.drawn) makePlot(p); }); }
  function lazyDraw() {
    var seen = window.innerHeight + 300;
    plots.forEach(function (p) { if (p.root.getBoundingClientRect().top < seen) makePlot(p); });
    if (!('IntersectionObserver' in window)) { drawAll(); return; }
    var io = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (!e.isIntersecting) return;
        var p = plots.filter(function (q) { return q.root === e.target; })[0];
        if (p && !p.drawn) makePlot(p);
        io.unobserve(e.target);
      });
    }, { rootMargin: '300px 0px' });
    plots.forEach(function (p) { if (!p.drawn) io.observe(p.root); });
  }

  // ---- header, runs, health, stability check, info ------------------------------------------------
  function header(app) {
    var h = el('header', 'top');
    h.appendChild(el('h1', '', D.name));
    document.title = D.name + ' \u00b7 minitrain dashboard';
    h.appendChild(el('span', 'badge ' + D.status, D.status));
    var inj = D.injection || {};
    var b;
    if (inj.withheld) { b = el('span', 'badge blind', 'injection withheld (blind run)'); b.id = 'injection-badge'; b.title = inj.words; }
    else if (inj.name && inj.name !== 'none') { b = el('span', 'badge inj', 'injection at K=' + inj.step + ': ' + inj.words); b.title = inj.words; }
    else b = el('span', 'badge base', 'no injection');
    b.id = 'injection-badge'; h.appendChild(b);
    if (D.sealed) h.appendChild(el('span', 'badge sealed', 'diagnosis sealed'));
    h.appendChild(el('span', 'spacer'));
    var sm = el('label', 'smooth');
    sm.appendChild(el('span', 'muted', 'smoothing '));
    var range = el('input'); range.type = 'range'; range.min = '0'; range.max = '0.99'; range.step = '0.01';
    range.value = String(state.smooth); range.id = 'smoothing';
    var sv = el('span', 'sval', state.smooth.toFixed(2)); sv.id = 'smoothing-value';
    range.addEventListener('input', function () {
      state.smooth = +range.value; sv.textContent = state.smooth.toFixed(2);
      plots.forEach(function (p) { if (p.spec.key === 'loss' || p.spec.key === 'classes') makePlot(p); });
    });
    sm.appendChild(range); sm.appendChild(sv); h.appendChild(sm);
    var z = el('span', 'zoom');
    z.appendChild(el('span', 'muted', 'drag or wheel: zoom \u00b7 shift+drag: pan \u00b7 double-click: reset \u00b7 click a legend entry: hide/show'));
    var r = el('span', ''); r.id = 'zoom-range'; z.appendChild(r);
    var reset = el('button', '', 'Reset zoom'); reset.id = 'reset-zoom';
    reset.addEventListener('click', function () { zoomTo(state.full[0], state.full[1]); });
    z.appendChild(reset);
    if (isNum(inj.step)) {
      var zk = el('button', '', 'Zoom on K'); zk.id = 'zoom-k';
      zk.addEventListener('click', function () { zoomTo(inj.step - 25, inj.step + 125); });
      z.appendChild(zk);
    }
    h.appendChild(z);
    app.appendChild(h);
    if (D.data_note) {
      var n = el('div', 'banner bad', 'Truncated data: ' + D.data_note + ' (a run killed mid-write). Everything up to there is shown.');
      n.id = 'data-note'; app.appendChild(n);
    }
    (D.notes || []).forEach(function (t) { app.appendChild(el('div', 'banner', t)); });
  }

  function runChooser(main) {
    var sec = el('section', 'runs'); sec.id = 'runs';
    sec.appendChild(el('span', 'hl', 'Runs on this page: '));
    var list = el('span', 'runlist'); sec.appendChild(list);
    function redraw() {
      list.textContent = '';
      allRuns().forEach(function (run, i) {
        var lab = el('label', 'runitem'), cb = el('input'); cb.type = 'checkbox';
        cb.checked = !!state.shown[run.name]; cb.disabled = run === ME; cb.setAttribute('data-run', run.name);
        cb.addEventListener('change', function () { state.shown[run.name] = cb.checked; redrawAll(); });
        var sw = el('span', 'tsw'); sw.style.background = run === ME ? '#1a5fb4' : runColor(run, i);
        lab.appendChild(cb); lab.appendChild(sw);
        lab.appendChild(document.createTextNode(run.name + (run === ME ? ' (this run)' : run.role === 'baseline' ? ' (baseline)' : '')));
        list.appendChild(lab);
      });
    }
    var add = el('label', 'addrun'), file = el('input');
    add.appendChild(document.createTextNode('add a run: open its dashboard.html '));
    file.type = 'file'; file.accept = '.html'; file.id = 'add-run';
    file.addEventListener('change', function () {
      Array.prototype.forEach.call(file.files, function (f) {
        var rd = new FileReader();
        rd.onload = function () {
          var other = null;
          try {  // parsed as an inert document: nothing in it runs
            var block = new DOMParser().parseFromString(String(rd.result), 'text/html').getElementById('dashboard-data');
            other = block && JSON.parse(block.textContent);
          } catch (e) { other = null; }
          if (!other || !other.runs) { sec.appendChild(el('span', 'bad', ' ' + f.name + ' is not a minitrain dashboard')); return; }
          var run = other.runs[0];
          if (state.shown[run.name] !== undefined) return;
          state.extra.push({ name: run.name, role: 'compare', steps: run.steps, series: run.series });
          state.shown[run.name] = true;
          redraw(); redrawAll();
        };
        rd.readAsText(f);
      });
    });
    add.appendChild(file); sec.appendChild(add);
    allRuns().forEach(function (r) { state.shown[r.name] = true; });
    redraw();
    main.appendChild(sec);
  }

  function healthSection(main) {
    var sec = el('section', 'health'); sec.id = 'health';
    var marks = { ok: '\u2713', warn: '!', bad: '\u2717', info: '\u00b7' };
    (D.health || []).forEach(function (it) {
      var d = el('div', 'hitem ' + it.verdict), l = el('div', 'hv');
      l.appendChild(el('span', 'mark', marks[it.verdict] || ''));
      l.appendChild(el('span', 'hl', it.label + ': '));
      l.appendChild(document.createTextNode(it.value));
      d.appendChild(l);
      if (it.detail) d.appendChild(el('div', 'hd', it.detail));
      d.title = it.label + ': ' + it.value + (it.detail ? ' (' + it.detail + ')' : '');
      sec.appendChild(d);
    });
    main.appendChild(sec);
  }

  function stabilitySection(main) {
    var ck = D.checks;
    if (!ck || !ck.questions.length) return;
    var sec = el('section', 'info'); sec.id = 'stability';
    sec.appendChild(el('h2', '', 'Stability check: every question of stability-check.md, measured on this run'));
    var body = el('div', 'stab'), v = ck.verdict;
    body.appendChild(el('p', 'verdict', v ? 'The walker\u2019s verdict (first matching leaf): ' + v.leaf + ' ' + v.title +
                        (v.anomaly_step !== null && v.anomaly_step !== undefined ? ' at step ' + v.anomaly_step : '') + ' (cause: ' + v.cause + ')'
                        : 'The walker\u2019s verdict is not in this page until the lab is revealed (minitrain reveal NAME); walk the table from \u00a71 yourself.'));
    var t = el('table', 'nodes'), hr = el('tr');
    ['node', 'question', 'read it on', 'threshold', 'measured', 'answer'].forEach(function (c) { hr.appendChild(el('th', '', c)); });
    t.appendChild(hr);
    ck.questions.forEach(function (n) {
      var tr = el('tr', n.answer === 'yes' ? 'yes' : '');
      [n.id, n.question, n.panel, n.threshold, n.measured + (n.step !== null && n.step !== undefined ? ' (step ' + n.step + ')' : ''), n.answer]
        .forEach(function (c) { tr.appendChild(el('td', '', c)); });
      t.appendChild(tr);
    });
    body.appendChild(t);
    if (D.sealed) {
      body.hidden = true;
      var p = el('p', 'muted', 'Hidden while this run\u2019s diagnosis is sealed: walk stability-check.md on the panels first. ');
      var btn = el('button', '', 'Reveal the measured values'); btn.id = 'reveal-stability';
      btn.addEventListener('click', function () { body.hidden = false; p.remove(); });
      p.appendChild(btn); sec.appendChild(p);
    }
    sec.appendChild(body);
    main.appendChild(sec);
  }

  function kvTable(obj, keys) {
    var t = el('table', 'kv');
    (keys || Object.keys(obj)).forEach(function (k) {
      if (!(k in obj)) return;
      var tr = el('tr'), v = obj[k];
      tr.appendChild(el('td', 'k', k));
      tr.appendChild(el('td', '', v !== null && typeof v === 'object' ? JSON.stringify(v) : (v === null ? 'null' : String(v))));
      t.appendChild(tr);
    });
    return t;
  }
  function infoSections(main) {
    var man = D.manifest || {}, res = D.results;
    if (D.diagnosis || D.diagnosis_note) {
      var ds = el('section', 'info diagnosis'); ds.id = 'diagnosis';
      ds.appendChild(el('h2', '', 'Diagnosis'));
      if (D.diagnosis_note) ds.appendChild(el('p', 'muted', D.diagnosis_note));
      if (D.diagnosis) {
        var d = D.diagnosis, dt = el('table', 'kv'), order = ['leaf', 'cause', 'anomaly_step', 'diagnosis', 'remediation', 'path'];
        order.concat(Object.keys(d).filter(function (k) { return order.indexOf(k) < 0 && k !== 'walk' && k !== 'evidence'; })).forEach(function (k) {
          if (!(k in d)) return;
          var v = d[k], txt = Array.isArray(v) ? v.map(function (x) { return typeof x === 'object' ? JSON.stringify(x) : String(x); }).join(' \u2192 ')
            : v !== null && typeof v === 'object' ? JSON.stringify(v) : String(v);
          var tr = el('tr'); tr.appendChild(el('td', 'k', k)); tr.appendChild(el('td', '', txt)); dt.appendChild(tr);
        });
        ds.appendChild(dt);
      }
      main.appendChild(ds);
    }
    var sec = el('section', 'info'); sec.id = 'manifest';
    sec.appendChild(el('h2', '', 'Run manifest'));
    sec.appendChild(kvTable(man, ['name', 'status', 'seed', 'git_sha', 'config_hash', 'trunk_hash', 'data_manifest_hash',
                                  'started', 'ended', 'forked_from', 'resumed_from_step', 'schema_version']));
    var inj = man.injection || {};
    sec.appendChild(el('h3', '', 'Injection'));
    var flat = {}; Object.keys(inj).forEach(function (k) { if (k !== 'record') flat[k] = inj[k]; });
    sec.appendChild(kvTable(flat));
    if (inj.record) { sec.appendChild(el('h3', '', 'Injection record (what it touched when it fired)')); sec.appendChild(kvTable(inj.record)); }
    sec.appendChild(el('h3', '', 'Versions and hardware'));
    sec.appendChild(kvTable(Object.assign({}, man.versions || {}, man.hardware || {})));
    sec.appendChild(el('h3', '', 'Config'));
    var c3 = el('div', 'cols3'); c3.appendChild(kvTable(man.config || {})); sec.appendChild(c3);
    var det = el('details'); det.appendChild(el('summary', '', 'full manifest.json'));
    det.appendChild(el('pre', 'raw', JSON.stringify(man, null, 2))); sec.appendChild(det);
    main.appendChild(sec);
    var rs = el('section', 'info'); rs.id = 'results';
    rs.appendChild(el('h2', '', 'Results (results.json)'));
    if (res) rs.appendChild(kvTable(res)); else rs.appendChild(el('p', 'muted', 'no results.json: the run has not finished (or was killed)'));
    main.appendChild(rs);
    main.appendChild(el('p', 'muted', 'Written ' + D.generated + ' by minitrain. Charts: uPlot (MIT), inlined. Values that ' +
                        'cannot be drawn (missing, non-finite, or \u2264 0 on a log axis) are gaps.'));
  }

  function init() {
    var app = document.getElementById('app');
    header(app);
    var main = el('main'); app.appendChild(main);
    healthSection(main);
    runChooser(main);
    var grid = el('div', 'grid'); grid.id = 'panels'; main.appendChild(grid);
    var lo = Infinity, hi = -Infinity;
    D.runs.forEach(function (r) { if (r.steps.length) { lo = Math.min(lo, r.steps[0]); hi = Math.max(hi, r.steps[r.steps.length - 1]); } });
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (hi <= lo) hi = lo + 1;
    state.full = [lo, hi];
    buildPanels(grid);
    stabilitySection(main);
    infoSections(main);
    lazyDraw();
    document.getElementById('zoom-range').textContent = 'steps ' + lo + '\u2013' + hi;
    var timer = null;
    window.addEventListener('resize', function () {
      clearTimeout(timer);
      timer = setTimeout(function () { plots.forEach(function (p) { if (p.u) p.u.setSize({ width: width(p), height: p.u.height }); }); }, 120);
    });
    window.__dashboard = { plots: plots, state: state, zoomTo: zoomTo, drawAll: drawAll };
    // uPlot paints in a microtask after each plot is made: ready once the first screen is on it
    requestAnimationFrame(function () { window.__dashboardReady = true; });
  }

  try { init(); } catch (err) {
    var b = el('div', 'banner bad', 'The dashboard script failed: ' + (err && err.message) + '. The data is in the page source (#dashboard-data).');
    document.body.insertBefore(b, document.body.firstChild);
    throw err;
  }
})();
