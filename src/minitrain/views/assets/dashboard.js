/* minitrain dashboard: draws the run data embedded in #dashboard-data as SVG plots sharing one step axis.
 * Drag across any plot to zoom every plot to those steps; double-click or "Reset zoom" to go back; hover to
 * read exact values at a step. Every string from the data reaches the screen through textContent, never
 * as HTML. No network: nothing here fetches anything. Sets window.__dashboardReady = true once drawn. */
(function () {
  'use strict';

  var D = JSON.parse(document.getElementById('dashboard-data').textContent);
  var S = D.series, STEPS = D.steps, B = D.baseline, C = D.compare || [];
  var SVGNS = 'http://www.w3.org/2000/svg';
  var PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd'];
  var BASE = '#9aa3ad';  // baseline curves: lighter, in grey
  // further runs drawn beside this one (--compare): one strong colour each, unlike this run's blues/greens
  var COMPARE = ['#c2185b', '#00897b', '#9c6500', '#455a64'];
  function cmpColor(i) { return COMPARE[i % COMPARE.length]; }
  var panels = [];
  var state = { x0: 0, x1: 1, full: [0, 1], hover: null };

  // ---- small helpers ---------------------------------------------------------------------------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = String(text);
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
  function tickLabel(v) {
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) {
      var e = v.toExponential(2).replace(/\.?0+e/, 'e').replace('e+', 'e');
      return e;
    }
    return String(+v.toPrecision(4));
  }
  function lowerBound(xs, v) {  // first index with xs[i] >= v
    var lo = 0, hi = xs.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (xs[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function atOrBefore(xs, v) {  // last index with xs[i] <= v, or -1
    return lowerBound(xs, v + 1e-9) - 1;
  }
  function niceTicks(lo, hi, n, integer) {
    var span = hi - lo;
    if (!(span > 0)) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10(span / n)));
    var err = span / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    if (integer && step < 1) step = 1;
    var out = [];
    for (var v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : +v.toPrecision(12));
    }
    return out;
  }
  function logTicks(l0, l1) {  // l0, l1 in log10 units; ticks only at real values, placed logarithmically
    var dec = l1 - l0, out = [];
    var mult = dec > 4 ? [1] : dec > 2.2 ? [1, 2, 5] : dec > 0.9 ? [1, 2, 3, 5] : [1, 2, 3, 4, 5, 6, 7, 8, 9];
    var every = dec > 9 ? Math.ceil(dec / 7) : 1;
    for (var d = Math.floor(l0); d <= Math.ceil(l1); d++) {
      if (mult.length === 1 && d % every !== 0) continue;
      for (var i = 0; i < mult.length; i++) {
        var v = mult[i] * Math.pow(10, d), lv = Math.log10(v);
        if (lv >= l0 - 1e-9 && lv <= l1 + 1e-9) out.push(+v.toPrecision(6));
      }
    }
    if (out.length < 3) {  // less than about half a decade shown: plain values, still placed on the log axis
      out = niceTicks(Math.pow(10, l0), Math.pow(10, l1), 4).filter(function (v) { return v > 0; });
    }
    return out;
  }
  // exponential moving average (0.9, bias-corrected like TensorBoard), skipping missing values;
  // returns only the steps that have a value, so the line bridges batches without that value
  function ema(xs, ys, beta) {
    var m = 0, n = 0, ox = [], oy = [];
    for (var i = 0; i < ys.length; i++) {
      if (!isNum(ys[i])) continue;
      n += 1; m = beta * m + (1 - beta) * ys[i];
      ox.push(xs[i]); oy.push(m / (1 - Math.pow(beta, n)));
    }
    return { x: ox, y: oy };
  }
  function pairs(list) {
    return { x: list.map(function (p) { return p[0]; }), y: list.map(function (p) { return p[1]; }) };
  }
  function color(i) { return PALETTE[i % PALETTE.length]; }

  // ---- one panel: an SVG plot of some series over the shared step axis --------------------------
  function Panel(o) {
    this.o = o;
    this.log = !!o.log;
    var root = this.root = el('div', 'panel' + (o.wide ? ' wide' : ''));
    root.id = 'panel-' + o.id;
    root.setAttribute('data-panel', o.id);
    var head = el('div', 'phead');
    head.appendChild(el('h2', 'ptitle', o.title));
    this.legend = el('div', 'legend');
    var ctl = el('div', 'ctl');
    if (o.control) o.control(ctl, this);
    if (o.logToggle) {
      var self = this, btn = el('button', this.log ? 'on' : '', 'log y');
      btn.title = 'switch the y axis between linear and log scale';
      btn.addEventListener('click', function () { self.log = !self.log; btn.className = self.log ? 'on' : ''; self.draw(); });
      ctl.appendChild(btn);
    }
    head.appendChild(ctl);
    root.appendChild(head);
    if (o.sub) root.appendChild(el('div', 'sub', o.sub));
    root.appendChild(this.legend);
    this.readout = el('div', 'readout');
    root.appendChild(this.readout);
    this.plot = el('div', 'plot');
    this.svg = sv('svg', {});
    this.plot.appendChild(this.svg);
    this.gapnote = el('div', 'gapnote');
    this.plot.appendChild(this.gapnote);
    root.appendChild(this.plot);
    this.bindMouse();
  }

  Panel.prototype.draw = function () {
    var o = this.o, svg = this.svg;
    var w = Math.max(240, this.plot.clientWidth || 600), h = o.height || 220;
    var strip = o.strip ? o.strip() : null;
    var m = { l: 54, r: 12, t: 14, b: 20 + (strip ? 11 : 0) };
    var pw = w - m.l - m.r, ph = h - m.t - m.b;
    var x0 = state.x0, x1 = state.x1 > state.x0 ? state.x1 : state.x0 + 1;
    var series = this.series = o.series(this);
    var log = this.log;
    this.geom = { m: m, pw: pw, ph: ph, x0: x0, x1: x1, w: w, h: h };
    this.root.setAttribute('data-x0', String(x0));
    this.root.setAttribute('data-x1', String(x1));
    svg.setAttribute('width', w); svg.setAttribute('height', h);
    svg.textContent = '';

    // y range over every visible point (nothing is clipped away) and the reference lines
    var lo = Infinity, hi = -Infinity, gaps = 0, i, s, v;
    for (var k = 0; k < series.length; k++) {
      s = series[k];
      for (i = Math.max(0, lowerBound(s.x, x0)); i < s.x.length && s.x[i] <= x1; i++) {
        v = s.y[i];
        if (!isNum(v)) { if (!s.sparse) gaps++; continue; }
        if (log && v <= 0) { gaps++; continue; }
        if (v < lo) lo = v; if (v > hi) hi = v;
      }
    }
    var hlines = (o.hlines || []).filter(function (l) { return isNum(l.y) && (!log || l.y > 0); });
    // reference lines widen the range, except a 'soft' one far from the data (e.g. ln V when zoomed in)
    var tr = log ? function (v) { return Math.log10(v); } : function (v) { return v; };
    var dlo = lo, dhi = hi, noData = !(lo <= hi);
    hlines.forEach(function (l) {
      if (l.soft && dlo <= dhi) {
        var pad = Math.max(tr(dhi) - tr(dlo), 1e-9) * 0.5;
        if (tr(l.y) < tr(dlo) - pad || tr(l.y) > tr(dhi) + pad) return;
      }
      if (l.y < lo) lo = l.y; if (l.y > hi) hi = l.y;
    });
    var empty = !(lo <= hi);
    if (empty) { lo = log ? 0.1 : 0; hi = 1; }
    if (!log && o.includeZero) { if (lo > 0) lo = 0; if (hi < 0) hi = 0; }
    var ymap, ticks;
    if (log) {
      var l0 = Math.log10(lo), l1 = Math.log10(hi);
      if (l1 - l0 < 1e-6) { l0 -= 0.15; l1 += 0.15; }
      var lp = (l1 - l0) * 0.05; l0 -= lp; l1 += lp;
      ymap = function (v) { return m.t + ph - (Math.log10(v) - l0) / (l1 - l0) * ph; };
      ticks = logTicks(l0, l1);
    } else {
      if (hi - lo < 1e-12) { var pad0 = Math.abs(hi) * 0.1 || 1; lo -= pad0; hi += pad0; }
      var p = (hi - lo) * 0.05;
      var ylo = (o.includeZero && lo === 0) ? 0 : lo - p, yhi = hi + p;
      ymap = function (v) { return m.t + ph - (v - ylo) / (yhi - ylo) * ph; };
      ticks = niceTicks(ylo, yhi, Math.max(3, Math.round(ph / 45)));
    }
    var xmap = function (x) { return m.l + (x - x0) / (x1 - x0) * pw; };
    this.xmap = xmap; this.ymap = ymap;

    var clipId = 'clip-' + o.id;
    var defs = sv('defs', {}), cp = sv('clipPath', { id: clipId });
    cp.appendChild(sv('rect', { x: m.l, y: m.t - 1, width: pw, height: ph + 2 }));
    defs.appendChild(cp); svg.appendChild(defs);

    // grid and axes
    var g = sv('g', { 'class': 'grid' });
    ticks.forEach(function (t) {
      var y = ymap(t);
      if (y < m.t - 0.5 || y > m.t + ph + 0.5) return;
      g.appendChild(sv('line', { x1: m.l, x2: m.l + pw, y1: y, y2: y }));
      svg.appendChild(sv('text', { x: m.l - 4, y: y + 3.5, 'text-anchor': 'end' }, tickLabel(t)));
    });
    var xt = niceTicks(x0, x1, Math.max(3, Math.round(pw / 90)), true);
    xt.forEach(function (t) {
      var x = xmap(t);
      g.appendChild(sv('line', { x1: x, x2: x, y1: m.t, y2: m.t + ph }));
      svg.appendChild(sv('text', { x: x, y: h - 5, 'text-anchor': 'middle' }, String(t)));
    });
    svg.insertBefore(g, svg.firstChild.nextSibling);
    svg.appendChild(sv('rect', { 'class': 'axis', x: m.l, y: m.t, width: pw, height: ph, fill: 'none' }));

    var body = sv('g', { 'clip-path': 'url(#' + clipId + ')' });
    svg.appendChild(body);

    // step markers (injection K, warmup end, non-finite, end of data, diagnosis): the line goes under the
    // data so it never hides a point, the label over it
    var labels = [], shown = 0;
    (D.markers || []).forEach(function (mk) {
      if (mk.step < x0 || mk.step > x1) return;
      var x = xmap(mk.step), grp = sv('g', { 'class': 'marker marker-' + mk.kind, 'data-step': mk.step });
      grp.appendChild(sv('line', { x1: x, x2: x, y1: m.t, y2: m.t + ph }));
      body.appendChild(grp);
      var text = o.longMarkers ? mk.label : mk.short, tw = text.length * 6.3;  // about 6.3 px per bold character
      var tx = x + 4, anchor = 'start';
      if (tx + tw > m.l + pw) {  // no room on the right: put it left of the line, or as far right as it fits
        if (x - 4 - tw >= m.l) { tx = x - 4; anchor = 'end'; } else tx = Math.max(m.l + 2, m.l + pw - tw);
      }
      var lab = sv('g', { 'class': 'marker marker-' + mk.kind + ' mlabel' });
      lab.appendChild(sv('text', { x: tx, y: m.t + 11 + 12 * shown, 'text-anchor': anchor }, text));
      labels.push(lab);
      shown++;
    });

    // reference lines
    hlines.forEach(function (l) {
      var y = ymap(l.y);
      body.appendChild(sv('line', { x1: m.l, x2: m.l + pw, y1: y, y2: y, stroke: l.color || '#333',
                                    'stroke-width': 1.3, 'stroke-dasharray': l.dash || '6 4' }));
      var t = sv('text', { x: m.l + pw - 4, y: y - 3, 'text-anchor': 'end', 'class': 'hline-label',
                           fill: l.color || '#333' }, l.label);
      t.style.fill = l.color || '#333';
      body.appendChild(t);
    });

    // clipping strip below the plot: one bar per run of consecutive clipped steps
    if (strip) {
      var sy = m.t + ph + 3, run0 = null, prev = null;
      var flush = function () {
        if (run0 === null) return;
        var a = xmap(Math.max(run0 - 0.5, x0)), b = xmap(Math.min(prev + 0.5, x1));
        svg.appendChild(sv('rect', { 'class': 'clip-band', x: a, y: sy, width: Math.max(1, b - a), height: 6,
                                     fill: strip.color }));
        run0 = null;
      };
      for (i = Math.max(0, lowerBound(strip.x, x0)); i < strip.x.length && strip.x[i] <= x1; i++) {
        if (strip.on[i]) {
          if (run0 === null || strip.x[i] !== prev + 1) { flush(); run0 = strip.x[i]; }
          prev = strip.x[i];
        } else flush();
      }
      flush();
    }

    // the series: a path broken at missing values and at missing steps
    for (k = 0; k < series.length; k++) {
      s = series[k];
      var d = [], pen = false, start = Math.max(0, lowerBound(s.x, x0) - 1), pts = [];
      for (i = start; i < s.x.length; i++) {
        v = s.y[i];
        var ok = isNum(v) && (!log || v > 0);
        if (!ok) { pen = false; continue; }
        if (pen && !s.connect && !s.sparse && s.x[i] - s.x[i - 1] > 1) pen = false;
        var px = xmap(s.x[i]).toFixed(1), py = ymap(v).toFixed(1);
        d.push((pen ? 'L' : 'M') + px + ' ' + py);
        pen = true;
        if (s.points && s.x[i] >= x0 && s.x[i] <= x1) pts.push([px, py]);
        if (s.x[i] > x1) break;
      }
      if (s.kind !== 'points' && d.length) {
        body.appendChild(sv('path', { d: d.join(''), fill: 'none', stroke: s.color, 'stroke-width': s.width || 1.3,
                                      'stroke-opacity': s.opacity || 1, 'stroke-dasharray': s.dash || 'none',
                                      'stroke-linejoin': 'round', 'class': 'series' }));
      }
      for (i = 0; i < pts.length; i++) {
        body.appendChild(sv('circle', { cx: pts[i][0], cy: pts[i][1], r: s.r || 2.6, fill: s.color,
                                        'fill-opacity': s.opacity || 1 }));
      }
    }

    // the course's spike flags (loss panel)
    if (o.flags) {
      o.flags.forEach(function (st) {  // a small triangle pointing down at the flagged loss
        var j = lowerBound(steps, st);
        if (st < x0 || st > x1 || steps[j] !== st || !isNum(S.loss[j])) return;
        var x = xmap(st), y = Math.max(m.t + 8, ymap(S.loss[j]) - 3);
        body.appendChild(sv('path', { 'class': 'spike-flag', d: 'M' + (x - 4) + ' ' + (y - 8) + 'L' + (x + 4) + ' ' + (y - 8) +
                                      'L' + x + ' ' + y + 'Z', fill: '#cf222e' }));
      });
    }

    labels.forEach(function (lab) { svg.appendChild(lab); });

    if (noData) svg.appendChild(sv('text', { x: m.l + pw / 2, y: m.t + ph / 2, 'text-anchor': 'middle', 'class': 'empty' },
                                  o.emptyText || 'no data in this step range'));
    this.gapnote.textContent = gaps ? (gaps + ' values ' + (o.gapReason || 'missing (non-finite)') +
                                       (log ? ' or \u2264 0' : '') + ': drawn as gaps') : '';

    this.hoverLine = sv('line', { 'class': 'hover', x1: 0, x2: 0, y1: m.t, y2: m.t + ph, visibility: 'hidden' });
    svg.appendChild(this.hoverLine);
    this.sel = sv('rect', { 'class': 'sel', x: 0, y: m.t, width: 0, height: ph, visibility: 'hidden' });
    svg.appendChild(this.sel);
    this.drawLegend(strip);
    this.showReadout(state.hover);
  };

  Panel.prototype.drawLegend = function (strip) {
    var lg = this.legend;
    lg.textContent = '';
    var add = function (label, colr, cls) {
      var item = el('span', 'li');
      var sw = el('span', 'sw' + (cls ? ' ' + cls : ''));
      if (cls === 'dot' || cls === 'band') sw.style.background = colr; else sw.style.borderTopColor = colr;
      item.appendChild(sw); item.appendChild(document.createTextNode(label));
      lg.appendChild(item);
    };
    this.series.forEach(function (s) {
      if (s.legend === false) return;
      add(s.label, s.color, s.kind === 'points' ? 'dot' : (s.dash ? 'dash' : ''));
    });
    (this.o.hlines || []).forEach(function (l) { if (isNum(l.y) && l.legend !== false) add(l.label, l.color || '#333', 'dash'); });
    if (strip) add(strip.label, strip.color, 'band');
  };

  Panel.prototype.showReadout = function (step) {
    var r = this.readout;
    r.textContent = '';
    var at = step;
    if (at === null || at === undefined) at = STEPS.length ? STEPS[STEPS.length - 1] : 0;
    r.appendChild(el('b', '', (step === null || step === undefined ? 'last step ' : 'step ') + at));
    var extra = this.o.readoutExtra ? this.o.readoutExtra(at) : null;
    this.series.forEach(function (s) {
      if (s.readout === false) return;
      var i = s.sparse || s.connect ? atOrBefore(s.x, at) : lowerBound(s.x, at);
      var txt;
      if (i < 0 || i >= s.x.length || (!(s.sparse || s.connect) && s.x[i] !== at)) txt = '\u2014';
      else txt = fmt(s.y[i], s.digits || 5) + (s.sparse && s.x[i] !== at ? ' @' + s.x[i] : '');
      r.appendChild(el('span', 'rs', ' \u00b7 ' + (s.short || s.label) + ' '));
      r.appendChild(document.createTextNode(txt));
    });
    if (extra) { r.appendChild(el('span', 'rs', ' \u00b7 ')); r.appendChild(document.createTextNode(extra)); }
  };

  Panel.prototype.setHover = function (step) {
    if (!this.hoverLine) return;
    if (step === null || step < state.x0 || step > state.x1) this.hoverLine.setAttribute('visibility', 'hidden');
    else {
      var x = this.xmap(step);
      this.hoverLine.setAttribute('x1', x); this.hoverLine.setAttribute('x2', x);
      this.hoverLine.setAttribute('visibility', 'visible');
    }
    this.showReadout(step);
  };

  Panel.prototype.bindMouse = function () {
    var self = this, svg = this.svg, drag = null;
    function stepAt(e) {
      var g = self.geom, rect = svg.getBoundingClientRect();
      var px = Math.min(Math.max(e.clientX - rect.left, g.m.l), g.m.l + g.pw);
      return { px: px, step: Math.round(g.x0 + (px - g.m.l) / g.pw * (g.x1 - g.x0)) };
    }
    svg.addEventListener('mousedown', function (e) {
      if (e.button !== 0) return;
      drag = stepAt(e); e.preventDefault();
    });
    svg.addEventListener('mousemove', function (e) {
      var at = stepAt(e);
      setHover(at.step);
      if (drag) {
        var a = Math.min(drag.px, at.px), b = Math.max(drag.px, at.px);
        self.sel.setAttribute('x', a); self.sel.setAttribute('width', b - a);
        self.sel.setAttribute('visibility', 'visible');
      }
    });
    svg.addEventListener('mouseleave', function () { if (!drag) setHover(null); });
    window.addEventListener('mouseup', function (e) {
      if (!drag) return;
      var at = stepAt(e), a = Math.min(drag.step, at.step), b = Math.max(drag.step, at.step);
      var moved = Math.abs(at.px - drag.px);
      drag = null;
      self.sel.setAttribute('visibility', 'hidden');
      if (moved > 4 && b > a) zoomTo(a, b);
    });
    svg.addEventListener('dblclick', function () { zoomTo(state.full[0], state.full[1]); });
  };

  function setHover(step) {
    state.hover = step;
    panels.forEach(function (p) { p.setHover(step); });
  }
  function zoomTo(a, b) {
    a = Math.max(state.full[0], Math.floor(a)); b = Math.min(state.full[1], Math.ceil(b));
    if (b - a < 2) { var c = (a + b) / 2; a = Math.max(state.full[0], Math.floor(c - 1)); b = a + 2; }
    state.x0 = a; state.x1 = b;
    drawAll();
  }
  function drawAll() {
    panels.forEach(function (p) { p.draw(); });
    var z = document.getElementById('zoom-range');
    if (z) z.textContent = 'steps ' + state.x0 + '\u2013' + state.x1;
  }

  // ---- which series each panel plots ------------------------------------------------------------
  var steps = STEPS;
  function line(label, y, colr, extra) {
    var s = { label: label, x: steps, y: y, color: colr, width: 1.3 };
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }
  function baseLine(label, y, extra) {
    var s = { label: label, x: B.steps, y: y, color: BASE, width: 1.6, opacity: 0.8 };
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }
  function smoothed(label, xs, ys, colr, extra) {
    var e = ema(xs, ys, 0.9), s = { label: label, x: e.x, y: e.y, color: colr, width: 2.2, connect: true };
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }
  var baseName = B ? B.name : '';

  function lossSeries() {
    var out = [line('train loss (raw)', S.loss, '#8fb8e8', { width: 1, short: 'train' })];
    C.forEach(function (c, i) {  // under this run's EMA, so this run stays on top where they agree
      out.push(smoothed(c.name + ' (EMA)', c.steps, c.loss, cmpColor(i), { width: 2, short: c.name + ' EMA' }));
    });
    out.push(smoothed('train EMA 0.9', steps, S.loss, '#1a5fb4', { short: 'EMA' }));
    C.forEach(function (c, i) {
      var cv = pairs(c.val);
      out.push({ label: c.name + ' val', short: c.name + ' val', x: cv.x, y: cv.y, color: cmpColor(i), kind: 'points',
                 points: true, sparse: true, r: 2.4 });
    });
    if (B) {
      out.push(smoothed('baseline ' + baseName + ' (EMA)', B.steps, B.loss, BASE, { width: 2, short: 'baseline EMA', opacity: 0.9 }));
      var bv = pairs(B.val);
      out.push({ label: 'baseline val', x: bv.x, y: bv.y, color: BASE, kind: 'points', points: true, sparse: true, r: 2.4 });
    }
    var v = pairs(S.val);
    out.push({ label: 'validation', x: v.x, y: v.y, color: '#e66100', width: 1.6, points: true, sparse: true, r: 3 });
    return out;
  }
  function gradSeries() {
    var out = [];
    if (B) out.push(baseLine('baseline pre-clip', B.grad_norm, { short: 'baseline' }));
    C.forEach(function (c, i) {
      out.push({ label: c.name + ' pre-clip', short: c.name, x: c.steps, y: c.grad_norm, color: cmpColor(i), width: 1.4 });
    });
    out.push(line('grad norm before clipping', S.grad_norm, '#1a5fb4', { short: 'pre-clip' }));
    out.push(line('after clipping', S.grad_norm_clipped, '#2da44e', { short: 'post-clip', width: 1.6 }));
    return out;
  }
  function clipStrip() {
    var n = 0, tot = 0;
    for (var i = 0; i < S.clipped.length; i++) { if (isNum(S.grad_norm[i])) { tot++; n += S.clipped[i]; } }
    return { x: steps, on: S.clipped, color: '#f0883e',
             label: 'clipped: ' + n + ' of ' + tot + ' steps (' + (tot ? (100 * n / tot).toFixed(1) : '0') + '%)' };
  }
  function classSeries() {
    var out = [line('regular (raw)', S.loss_regular, '#a8d5b0', { width: 0.9, short: 'regular' }),
               line('irregular (raw)', S.loss_irregular, '#d3bdf0', { width: 0.9, short: 'irregular' }),
               smoothed('regular EMA', steps, S.loss_regular, '#1a7f37', { short: 'regular EMA' }),
               smoothed('irregular EMA', steps, S.loss_irregular, '#8250df', { short: 'irregular EMA' })];
    if (B) {
      out.push(smoothed('baseline regular EMA', B.steps, B.loss_regular, BASE, { width: 1.6, readout: false, legend: false }));
      out.push(smoothed('baseline EMA (both classes)', B.steps, B.loss_irregular, BASE, { width: 1.6, dash: '5 3', short: 'baseline irregular EMA' }));
    }
    return out;
  }
  function actSeries() {
    var out = [];
    if (B) B.act.forEach(function (y, i) { out.push(baseLine('baseline layer ' + i, y, { legend: i === 0, label: 'baseline', readout: false })); });
    S.act.forEach(function (y, i) { out.push(line('layer ' + i + ' mean |activation|', y, color(i), { short: 'layer ' + i })); });
    return out;
  }
  function logitSeries() {
    var out = [];
    if (B) out.push(baseLine('baseline', B.logit_max));
    out.push(line('max |logit|', S.logit_max, '#9467bd'));
    return out;
  }

  // per-tensor panels: the movers plus any tensor picked in the selector
  function tensorPanel(stat) {
    var PT = D.per_tensor;
    var sig = stat === 'sigma';
    var names = sig ? PT.sigma.names : PT.names;
    var movers = (D.movers[stat] || []);
    var all = !!D.movers_all && D.movers_all.indexOf(stat) >= 0;  // few enough tensors: show every one
    var pick = { value: '' };
    function series() {
      var idx = movers.map(function (m) { return m.index; });
      if (pick.value === '*' || all) idx = names.map(function (_, i) { return i; });
      else if (pick.value !== '' && idx.indexOf(+pick.value) < 0) idx.push(+pick.value);
      return idx.map(function (i) {
        var mv = movers.filter(function (m) { return m.index === i; })[0];
        var gi = sig ? PT.names.indexOf(names[i]) : i;  // same colour for a tensor in every panel
        var label = names[i] + (mv ? ' (x' + fmt(mv.factor, 3) + ' at ' + mv.step + ')' : '');
        return { label: label, short: names[i], x: sig ? PT.sigma.steps : steps,
                 y: sig ? PT.sigma.values[i] : PT.stats[stat][i], color: color(gi < 0 ? i : gi), width: 1.4,
                 sparse: sig, points: sig, r: 2 };
      });
    }
    function control(ctl, panel) {
      var sel = el('select');
      sel.title = 'add any tensor to the plot';
      var o0 = el('option', '', 'movers only'); o0.value = ''; sel.appendChild(o0);
      var oa = el('option', '', 'all ' + names.length + ' tensors'); oa.value = '*'; sel.appendChild(oa);
      if (all) return;
      names.forEach(function (n, i) { var op = el('option', '', '+ ' + n); op.value = String(i); sel.appendChild(op); });
      sel.addEventListener('change', function () { pick.value = sel.value; panel.draw(); });
      ctl.appendChild(sel);
    }
    return { series: series, control: control, movers: movers };
  }

  // ---- page ------------------------------------------------------------------------------------
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

  function header(app) {
    var h = el('header', 'top');
    h.appendChild(el('h1', '', D.name));
    document.title = D.name + ' \u00b7 minitrain dashboard';
    h.appendChild(el('span', 'badge ' + D.status, D.status));
    var inj = D.injection || {};
    if (inj.name && inj.name !== 'none') {
      var b = el('span', 'badge inj', 'injection at K=' + inj.step + ': ' + inj.words);
      b.title = inj.words; h.appendChild(b);
    } else h.appendChild(el('span', 'badge base', 'no injection'));
    if (B) h.appendChild(el('span', 'badge base', 'baseline overlay: ' + B.name));
    C.forEach(function (c, i) {
      var cb = el('span', 'badge cmp', 'compared: ' + c.name);
      cb.style.color = cmpColor(i); cb.style.border = '1px solid ' + cmpColor(i); cb.style.background = '#fff';
      h.appendChild(cb);
    });
    h.appendChild(el('span', 'spacer'));
    var z = el('span', 'zoom');
    z.appendChild(el('span', 'muted', 'drag on a plot: zoom all \u00b7 double-click: reset'));
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

  function healthSection(main) {
    var sec = el('section', 'health'); sec.id = 'health';
    var marks = { ok: '\u2713', warn: '!', bad: '\u2717', info: '\u00b7' };
    (D.health || []).forEach(function (it) {
      var d = el('div', 'hitem ' + it.verdict);
      var l = el('div', 'hv');
      l.appendChild(el('span', 'mark', marks[it.verdict] || ''));
      l.appendChild(el('span', 'hl', it.label + ': '));
      l.appendChild(document.createTextNode(it.value));
      d.appendChild(l);
      if (it.detail) d.appendChild(el('div', 'hd', it.detail));
      d.title = it.label + ': ' + it.value + (it.detail ? ' (' + it.detail + ')' : '');
      sec.appendChild(d);
    });
    if (D.diagnosis) {
      var dd = el('div', 'hitem bad');
      var dl = el('div', 'hv'); dl.appendChild(el('span', 'mark', '\u2192')); dl.appendChild(el('span', 'hl', 'diagnosis: '));
      dl.appendChild(document.createTextNode(String(D.diagnosis.leaf || D.diagnosis.cause || 'present') +
                        (D.diagnosis.anomaly_step !== undefined && D.diagnosis.anomaly_step !== null ? ' at step ' + D.diagnosis.anomaly_step : '')));
      dd.appendChild(dl);
      dd.appendChild(el('div', 'hd', 'see the Diagnosis section below the plots'));
      sec.appendChild(dd);
    }
    main.appendChild(sec);
  }

  function buildPanels(grid) {
    var cfg = D.config || {};
    var clip = cfg.grad_clip, vocab = cfg.vocab_size || 512;
    var hl = [];
    if (isNum(D.ngram_val_loss)) hl.push({ y: D.ngram_val_loss, label: 'n-gram val loss ' + fmt(D.ngram_val_loss, 4), color: '#333', dash: '7 4', soft: true });
    hl.push({ y: Math.log(vocab), label: 'ln ' + vocab + ' = ' + fmt(Math.log(vocab), 4) + ' (untrained)', color: '#8a93a0', dash: '2 3', soft: true });
    var specs = [
      { id: 'loss', title: 'Loss (log scale)', log: true, height: 290, longMarkers: true, series: lossSeries, hlines: hl,
        flags: D.spikes, sub: 'training loss of each batch before its update, its EMA, validation every ' + (cfg.eval_every || '?') +
        ' steps' + (D.spikes && D.spikes.length ? '; red triangles: the course\u2019s spike flag (> 3\u03c3 above the rolling 100-step mean)' : '') },
      { id: 'grad', title: 'Gradient norm, before and after clipping', logToggle: true, includeZero: true, height: 290,
        longMarkers: true, series: gradSeries, strip: clipStrip,
        hlines: [{ y: clip, label: 'clip threshold ' + clip, color: '#cf222e', dash: '6 3' }],
        sub: 'global L2 norm of every step (not aggregated); the orange band marks each step where clipping engaged' }
    ];
    if (B) {
      var dl = B.diff, fd = dl.first_difference;
      var same = fd === null ? 'identical at every shared step' :
        (fd > steps[0] ? 'exactly 0 for steps ' + steps[0] + '\u2013' + (fd - 1) + ' (shared trunk); first difference at step ' + fd
                       : 'differs from the first shared step ' + fd);
      var dv = { x: dl.val_steps, y: dl.val_loss };
      var cd = C.filter(function (c) { return c.diff; });
      var who = cd.length ? 'this run: ' : '';  // with compared runs, say whose difference each line is
      var mine = cd.length ? '#1a5fb4' : '#8250df';  // ... and draw this run's in its blue, as on the loss panel
      var also = cd.length ? '; also ' + cd.map(function (c) { return c.name; }).join(', ') + ' minus ' + B.name + ', in its own colour' : '';
      specs.push({ id: 'diff-loss', title: 'Injected minus baseline: loss', includeZero: true, series: function () {
        var out = [];
        C.forEach(function (c, i) {  // under this run's lines, so this run stays on top where they agree
          if (!c.diff) return;
          out.push({ label: c.name + ': train loss difference', short: '\u0394 ' + c.name, x: c.diff.steps, y: c.diff.loss,
                     color: cmpColor(i), width: 1.6, digits: 6 });
          out.push({ label: c.name + ': validation difference', short: '\u0394 val ' + c.name, x: c.diff.val_steps, y: c.diff.val_loss,
                     color: cmpColor(i), kind: 'points', points: true, sparse: true, r: 2.6, digits: 6 });
        });
        return out.concat([{ label: who + 'train loss difference', short: '\u0394 train', x: dl.steps, y: dl.loss, color: mine, width: 1.3, digits: 6 },
                { label: who + 'validation difference', short: '\u0394 val', x: dv.x, y: dv.y, color: '#e66100', points: true, sparse: true, width: 1.5, digits: 6 }]);
      }, hlines: [{ y: 0, label: '0', color: '#888', dash: '1 0', legend: false }], sub: 'this run minus ' + B.name + ', step by step: ' + same + also });
      specs.push({ id: 'diff-grad', title: 'Injected minus baseline: gradient norm', includeZero: true, series: function () {
        var out = [];
        C.forEach(function (c, i) {
          if (c.diff) out.push({ label: c.name + ': pre-clip grad norm difference', short: '\u0394 ' + c.name, x: c.diff.steps,
                                 y: c.diff.grad_norm, color: cmpColor(i), width: 1.6, digits: 6 });
        });
        return out.concat([{ label: who + 'pre-clip grad norm difference', short: '\u0394 grad norm', x: dl.steps, y: dl.grad_norm, color: mine, width: 1.3, digits: 6 }]);
      }, hlines: [{ y: 0, label: '0', color: '#888', dash: '1 0', legend: false }], sub: 'runs are deterministic, so every non-zero value is the injection\u2019s doing' + also });
    }
    specs.push({ id: 'lr', title: 'Learning rate', includeZero: true, series: function () { return [line('learning rate', S.lr, '#1a5fb4', { digits: 4 })]; },
                 sub: 'linear warmup over ' + (isNum(cfg.warmup_steps) ? cfg.warmup_steps : '?') + ' steps, then cosine decay' });
    specs.push({ id: 'classes', title: 'Loss on regular vs irregular verbs (log scale)', log: true, series: classSeries,
                 gapReason: 'missing (batches without that class)',
                 sub: 'batch loss over each verb class\u2019s rows (gaps: batches without that class), with EMAs' });
    if (D.per_tensor) {
      var rule = D.movers_rule;
      var tp = [['g', 'Per-tensor gradient norm (before clipping)', 'norm of each parameter\u2019s gradient'],
                ['ur', 'Per-tensor update-to-weight ratio', '|\u0394w| / |w| of this step\u2019s update'],
                ['vm', 'Per-tensor Adam second moment (mean of v)', 'mean of exp_avg_sq after the step']];
      tp.forEach(function (t) {
        var p = tensorPanel(t[0]);
        specs.push({ id: 'tensor-' + t[0], title: t[1] + ' (log scale)', log: true, series: p.series, control: p.control,
                     sub: t[2] + '. Shown: the ' + p.movers.length + ' tensors that move most (x = largest ratio to the median of ' +
                          'their own previous 50 steps, ' + rule + '); the selector adds any tensor.' });
      });
      if (D.per_tensor.sigma.names.length) {
        var ps = tensorPanel('sigma');
        specs.push({ id: 'tensor-sigma', title: 'Spectral norm \u03c3max of weight matrices (log scale)', log: true, series: ps.series,
                     sub: 'largest singular value of every weight matrix (power iteration), sampled every ' + (cfg.spectral_every || '?') + ' steps' });
      }
    } else {
      specs.push({ id: 'tensor-none', title: 'Per-tensor telemetry', series: function () { return []; },
                   emptyText: 'no per-parameter telemetry in this run (telemetry: ' + (cfg.telemetry || '?') + ')' });
    }
    specs.push({ id: 'act', title: 'Mean absolute activation per layer', logToggle: true, series: actSeries,
                 sub: 'mean |output| of each transformer block' });
    specs.push({ id: 'logits', title: 'Largest output logit |logit|', logToggle: true, series: logitSeries,
                 sub: 'largest absolute logit of the batch (exploding logits precede NaN)' });
    var bt = S.batch, bs = cfg.batch_size || 1;
    var dupShare = bt.dup_rows.map(function (v) { return isNum(v) ? v / bs : null; });
    specs.push({ id: 'batch-shares', title: 'Batch composition: shares', includeZero: true, series: function () {
      return [line('duplicated rows / batch size', dupShare, '#000000', { short: 'dup rows', width: 1.6, digits: 4 }),
              line('rare-token share', bt.rare_share, '#e66100', { short: 'rare' }),
              line('largest single-token share', bt.top_token_share, '#1a5fb4', { short: 'top token' })];
    }, readoutExtra: function (at) { var i = lowerBound(steps, at); return steps[i] === at ? 'dup rows ' + bt.dup_rows[i] + ' of ' + bs : ''; },
      sub: 'duplicated rows = rows identical to an earlier row of the batch; rare = tokens under 0.1% of the training split' });
    specs.push({ id: 'batch-counts', title: 'Batch composition: distinct tokens', series: function () {
      return [line('distinct tokens in the batch', bt.distinct_tokens, '#1a5fb4', { short: 'distinct' })];
    }, readoutExtra: function (at) { var i = lowerBound(steps, at); return steps[i] === at ? 'non-finite values ' + S.nonfinite[i] : ''; },
      sub: 'a batch of repeated rows has few distinct tokens' });
    specs.forEach(function (sp) { var p = new Panel(sp); panels.push(p); grid.appendChild(p.root); });
  }

  function infoSections(main) {
    var man = D.manifest || {}, res = D.results;
    if (D.diagnosis || D.diagnosis_note) {
      var ds = el('section', 'info diagnosis'); ds.id = 'diagnosis';
      ds.appendChild(el('h2', '', 'Diagnosis'));
      if (D.diagnosis_note) ds.appendChild(el('p', 'muted', D.diagnosis_note));
      if (D.diagnosis) renderDiagnosis(ds, D.diagnosis);
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
    if (man.ngram_baseline) { sec.appendChild(el('h3', '', 'n-gram baseline')); sec.appendChild(kvTable(man.ngram_baseline)); }
    var det = el('details'); det.appendChild(el('summary', '', 'full manifest.json'));
    det.appendChild(el('pre', 'raw', JSON.stringify(man, null, 2))); sec.appendChild(det);
    main.appendChild(sec);
    var rs = el('section', 'info'); rs.id = 'results';
    rs.appendChild(el('h2', '', 'Results (results.json)'));
    if (res) rs.appendChild(kvTable(res)); else rs.appendChild(el('p', 'muted', 'no results.json: the run has not finished (or was killed)'));
    main.appendChild(rs);
    var foot = el('p', 'muted', 'Written ' + D.generated + ' by minitrain. Plots are SVG drawn by an inline script; ' +
                  'log axes put ticks only at real values; no point is ever left out of a y range; values that cannot ' +
                  'be drawn (missing, non-finite, or \u2264 0 on a log axis) are gaps and are counted in the plot corner.');
    main.appendChild(foot);
  }

  // Hook for the diagnosis section: diagnosis.json beside the run (leaf, cause, anomaly_step, diagnosis,
  // remediation, path); unknown keys are shown too.
  function renderDiagnosis(sec, d) {
    var order = ['leaf', 'cause', 'anomaly_step', 'diagnosis', 'remediation', 'path'];
    var t = el('table', 'kv');
    order.concat(Object.keys(d).filter(function (k) { return order.indexOf(k) < 0; })).forEach(function (k) {
      if (!(k in d)) return;
      var v = d[k], txt;
      if (Array.isArray(v)) txt = v.map(function (x) { return typeof x === 'object' ? JSON.stringify(x) : String(x); }).join(' \u2192 ');
      else if (v !== null && typeof v === 'object') txt = JSON.stringify(v);
      else txt = String(v);
      var tr = el('tr'); tr.appendChild(el('td', 'k', k)); tr.appendChild(el('td', '', txt)); t.appendChild(tr);
    });
    sec.appendChild(t);
  }

  function init() {
    var app = document.getElementById('app');
    header(app);
    var main = el('main'); app.appendChild(main);
    healthSection(main);
    var grid = el('div', 'grid'); grid.id = 'panels'; main.appendChild(grid);
    var lo = STEPS.length ? STEPS[0] : 0, hi = STEPS.length ? STEPS[STEPS.length - 1] : 1;
    (B ? [B] : []).concat(C).forEach(function (o) {
      if (o.steps.length) { lo = Math.min(lo, o.steps[0]); hi = Math.max(hi, o.steps[o.steps.length - 1]); }
    });
    if (hi <= lo) hi = lo + 1;
    state.full = [lo, hi]; state.x0 = lo; state.x1 = hi;
    buildPanels(grid);
    infoSections(main);
    drawAll();
    var timer = null;
    window.addEventListener('resize', function () { clearTimeout(timer); timer = setTimeout(drawAll, 120); });
    window.__dashboardReady = true;
  }

  try { init(); } catch (err) {
    var b = el('div', 'banner bad', 'The dashboard script failed: ' + (err && err.message) + '. The data is in the page source (#dashboard-data).');
    document.body.insertBefore(b, document.body.firstChild);
    throw err;
  }
})();
