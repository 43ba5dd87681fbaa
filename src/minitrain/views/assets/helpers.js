/* helpers.js: the pages' pure helpers (numbers in, numbers or text out), their one palette and their one DOM
 * maker; every page (the dashboard, the runs table, the regime map, the LR sweep) loads it first.
 * Unit-tested in headless Chromium by tests/test_dashboard_js.py. */
var helpers = (function () {
  'use strict';

  function isNum(v) { return typeof v === 'number' && isFinite(v); }

  // a value for the tooltip and the legend: p significant digits (5 by default), exponent outside 1e-3..1e5
  function fmt(v, p) {
    if (v === null || v === undefined) return '\u2014';
    if (typeof v !== 'number') return String(v);
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential((p || 5) - 1).replace('e+', 'e');  // layout: notation
    return String(+v.toPrecision(p || 5));
  }

  // an axis label: short, no trailing zeros
  function tick(v) {
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(2).replace(/\.?0+e/, 'e').replace('e+', 'e');  // layout: notation
    return String(+v.toPrecision(4));
  }

  // log-axis labels between min and max: 1, 2 and 5 of each decade (only 1 over more than 3 decades)
  function logTickLabels(vals, min, max) {
    var decades = Math.log10(max / min);
    return vals.map(function (v) {
      var m = Math.round(v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9)));
      return (m === 1 || (decades <= 3 && (m === 2 || m === 5))) ? tick(v) : '';  // layout: labels that fit
    });
  }

  // exponential moving average with weight w, debiased as TensorBoard does; missing values stay missing
  function ema(ys, w) {
    var m = 0, n = 0, out = new Array(ys.length);
    for (var i = 0; i < ys.length; i++) {
      if (!isNum(ys[i])) { out[i] = null; continue; }
      n += 1; m = w * m + (1 - w) * ys[i];
      out[i] = m / (1 - Math.pow(w, n));
    }
    return out;
  }

  // the y range of a panel's data lo..hi. how.log: whole decades (uPlot's log ticks need them);
  // how.fromZero: the range includes 0; how.symmetric: -m..m around 0, m never below how.bound (so float
  // rounding noise within the bound stays small on the axis)
  function yRange(lo, hi, how) {
    if (how.symmetric) {
      var m = Math.max(Math.abs(lo || 0), Math.abs(hi || 0));
      if (isNum(how.bound)) m = Math.max(m, how.bound) * 1.15;
      if (!(m > 0)) m = 1;
      return [-m * 1.05, m * 1.05];
    }
    if (how.log) {
      if (!(lo > 0)) return [0.1, 1];
      return uPlot.rangeLog(lo, hi, 10, true);
    }
    if (lo === null || hi === null) return [0, 1];
    if (how.fromZero) lo = Math.min(0, lo);
    var span = hi - lo || Math.abs(hi) * 0.1 || 1;
    return [how.fromZero && lo === 0 ? 0 : lo - span * 0.05, hi + span * 0.05];
  }

  // the index of the step in sorted xs nearest to x (the earlier one on a tie); -1 when xs is empty
  function nearestIndex(xs, x) {
    if (!xs.length) return -1;
    var lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) {
      var mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid; else hi = mid;
    }
    return x - xs[lo] <= xs[hi] - x ? lo : hi;
  }

  // the first index of sorted xs whose step is >= x (xs.length when none is)
  function lowerBound(xs, x) {
    var lo = 0, hi = xs.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // The step a panel is read at when the cursor stands on the pixel column of steps a..b (i0: the index of the
  // step nearest the cursor; cols: the drawn lines' y columns over xs). A column holds several steps when the
  // run has more steps than the plot has pixels, and the lines drawn there reach every one of their values;
  // the tooltip reads the step where some line is farthest from its own median over the three columns around
  // the cursor (in units of that line's range there), so a spike inside the column is never skipped. i0 when
  // the column holds one step or none, or every line is flat around it (ties: the step nearest i0).
  function columnStep(xs, cols, a, b, i0) {
    var w = b - a, lo = lowerBound(xs, a - w), first = lowerBound(xs, a), best = i0, top = 0;
    var hi = lowerBound(xs, b + w + 1e-9), last = lowerBound(xs, b + 1e-9);
    if (last - first < 2) return i0;  // layout: one step in view
    cols.forEach(function (ys) {
      var around = [];
      for (var j = lo; j < hi; j++) if (isNum(ys[j])) around.push(ys[j]);
      if (around.length < 2) return;
      around.sort(function (p, q) { return p - q; });
      var n = around.length, span = around[n - 1] - around[0];
      var med = n % 2 ? around[(n - 1) / 2] : (around[n / 2 - 1] + around[n / 2]) / 2;
      if (!(span > 0)) return;
      for (var k = first; k < last; k++) {
        if (!isNum(ys[k])) continue;
        var z = Math.abs(ys[k] - med) / span;
        if (z > top || (z === top && z > 0 && Math.abs(k - i0) < Math.abs(best - i0))) { top = z; best = k; }
      }
    });
    return best;
  }

  // the point a series shows at index i: its own value there, or, when it is measured at some steps only
  // (carry), its last value at or before i; null when there is none
  function pointAt(xs, ys, i, carry) {
    for (var j = i; j >= 0; j--) {
      if (isNum(ys[j])) return { x: xs[j], y: ys[j] };
      if (!carry) break;
    }
    return null;
  }

  // a colour at 35% on white (the raw line under a smoothed one)
  function fade(hex) {
    var n = parseInt(hex.slice(1), 16), r = n >> 16, g = (n >> 8) & 255, b = n & 255;
    function f(c) { return Math.round(255 - (255 - c) * 0.35); }
    return 'rgb(' + f(r) + ',' + f(g) + ',' + f(b) + ')';
  }

  function safeName(s) { return String(s).replace(/[^A-Za-z0-9._-]+/g, '_'); }

  // the one palette: line i of a chart (a tensor, a run of the runs table, a variant of the LR sweep)
  var PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd'];
  var BASELINE = '#8d96a3';  // the baseline run: grey
  var COMPARED = ['#c2185b', '#00897b', '#9c6500', '#455a64', '#6a1b9a', '#2e7d32'];  // runs beside this one
  function color(i) { return PALETTE[i % PALETTE.length]; }

  // the one way text reaches the screen: textContent, never HTML. `cls`: a class name, or {attribute: value}
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (typeof cls === 'string' && cls) e.className = cls;
    else if (cls && typeof cls === 'object') Object.keys(cls).forEach(function (k) { e.setAttribute(k, cls[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  return { PALETTE: PALETTE, BASELINE: BASELINE, COMPARED: COMPARED, color: color, isNum: isNum, fmt: fmt, tick: tick, logTickLabels: logTickLabels, ema: ema, yRange: yRange,
           nearestIndex: nearestIndex, lowerBound: lowerBound, columnStep: columnStep, pointAt: pointAt, fade: fade, safeName: safeName, el: el };
})();
