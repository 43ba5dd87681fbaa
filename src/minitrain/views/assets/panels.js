/* panels.js: what each panel draws, read from its entry in the panel registry (analysis/panels.py, in the
 * page data as D.panels): its series specs, reference lines, note, y range. A series spec names a signal;
 * the signal's prefix says where the page data holds it (the registry's naming: docs/metrics.md). */
var panels = (function () {
  'use strict';
  var isNum = helpers.isNum, fmt = helpers.fmt, color = helpers.color, OTHER = helpers.COMPARED;
  var DASH = [5, 3];
  function runColor(run, i) { return run.role === 'baseline' ? helpers.BASELINE : OTHER[i % OTHER.length]; }

  // D: the page data; view: {shown: run name -> drawn, extra: runs added in the page, pick: stat -> tensors}
  function create(D, view) {
    var ME = D.runs[0], CFG = D.config || {}, SIG = D.checks ? D.checks.signals : null, RULES = D.rules || {};

    // A line: {label, x, y, color, width, dash, smooth (raw + EMA), sparse (points, bridged), span (bridged)}
    function line(s, label, x, y, colr, extra) {
      var out = { label: label, x: x, y: y, color: colr, width: s.width, dash: null, smooth: s.smooth,
                  sparse: s.per === 'sample', span: !!s.span };
      for (var k in extra || {}) out[k] = extra[k];
      return out;
    }
    function field(signal) { return signal.slice(signal.indexOf('.') + 1); }
    function allRuns() { return D.runs.concat(view.extra); }
    function visibleRuns() { return allRuns().filter(function (r) { return view.shown[r.name]; }); }

    // Each source gives its lines in groups (one per run, or one), so that a panel draws run by run.
    // every run on the page draws the series (the other runs under this one, in their own colour)
    function runLines(s) {
      var col = s.signal.indexOf('batch.') === 0 ? function (run) { return run.series.batch[field(s.signal)]; }
                                                 : function (run) { return run.series[s.signal]; };
      var div = s.divide_by ? (CFG[s.divide_by] || 1) : 1;
      function one(run, i) {
        var own = run === ME, c = own ? null : runColor(run, i), pre = own ? '' : run.name + ': ';
        if (s.own && !own) return [];
        var y = col(run), x = run.steps;
        if (!y) return [];
        if (s.per === 'layer') {  // another run's layers: one colour, told apart by their dash
          return y.map(function (ly, l) { return line(s, pre + s.label + ' ' + l, x, ly, c || color(l), { dash: c && l ? DASH : null }); });
        }
        if (s.per === 'sample') { x = y.map(function (p) { return p[0]; }); y = y.map(function (p) { return p[1]; }); }
        if (s.divide_by) y = y.map(function (v) { return isNum(v) ? v / div : null; });
        return [line(s, pre + s.label, x, y, c || s.color, { dash: c && s.dash_others ? DASH : null })];
      }
      var groups = [];
      visibleRuns().forEach(function (run, i) { if (run !== ME) groups.push(one(run, i)); });
      return groups.concat([one(ME, 0)]);  // this run last: on top
    }
    // every shown run's exact difference to the baseline
    function diffLines(s) {
      return D.diffs.map(function (d, i) {
        if (!view.shown[d.name]) return [];
        var own = d.name === ME.name, pre = own ? '' : d.name + ': ';
        var x = s.per === 'sample' ? d.val_steps : d.steps;  // validation is measured at some steps only
        return [line(s, pre + s.label, x, d[field(s.signal)], own ? s.color : OTHER[i % OTHER.length])];
      });
    }
    // this run's tensors: the movers, all of them, or the movers plus one picked in the panel
    function tensorLines(s) {
      var stat = field(s.signal), PT = ME.per_tensor, mv = D.movers[stat] || [], pick = view.pick[stat] || '';
      var idx = mv.map(function (m) { return m.index; });
      if (pick === '*') idx = PT.names.map(function (_, i) { return i; });
      else if (pick !== '' && idx.indexOf(+pick) < 0) idx.push(+pick);
      return [idx.map(function (i) {
        var m = mv.filter(function (q) { return q.index === i; })[0];
        // span: statistics measured on detail steps only (telemetry's schedule) are joined across the steps between
        var moved = m ? (m.rose === false ? ' (1/' + fmt(m.factor, 3) + ' of' : ' (x' + fmt(m.factor, 3)) : '';
        return line(s, PT.names[i] + (m ? moved + ' its ' + RULES.movers_lookback + '-step median, step ' + m.step + ')' : ''),
                    ME.steps, PT.stats[stat][i], color(i), { span: true });
      })];
    }
    // the spectral norms: per weight matrix, sampled every spectral_every steps
    function sigmaLines(s) {
      var sg = ME.per_tensor.sigma;
      return [sg.names.map(function (n, i) {
        var gi = ME.per_tensor.names.indexOf(n);
        return line(s, n, sg.steps, sg.values[i], color(gi < 0 ? i : gi), { sparse: true });
      })];
    }
    // a quantity the stability tree computes from the metrics (analysis/readings.py)
    function checkLines(s) { return [[line(s, s.label, SIG.steps, SIG[field(s.signal)], s.color)]]; }

    // where a signal is in the page data, by its prefix (`sigma` is the one per-tensor signal outside params.):
    // its lines, and whether the page data has it at all (a panel that needs it is left out otherwise)
    function always() { return true; }
    var SOURCES = {
      '': { lines: runLines, present: always },
      batch: { lines: runLines, present: always },
      baseline: { lines: diffLines, present: function () { return D.diffs.length > 0; } },
      params: { lines: tensorLines, present: function () { return !!ME.per_tensor; } },
      check: { lines: checkLines, present: function (signal) { return !!(SIG && SIG[field(signal)]); } },
      sigma: { lines: sigmaLines, present: function () { return !!ME.per_tensor && ME.per_tensor.sigma.names.length > 0; } },
    };
    function sourceOf(signal) {
      var dot = signal.indexOf('.');
      return SOURCES[signal] || SOURCES[dot < 0 ? '' : signal.slice(0, dot)];
    }

    function seriesOf(spec) {  // group by group (run by run), each group in the order of the panel's series
      var bySeries = spec.series.map(function (s) { return sourceOf(s.signal).lines(s); }), out = [];
      for (var g = 0; g < bySeries[0].length; g++) bySeries.forEach(function (groups) { out = out.concat(groups[g]); });
      return out;
    }
    function wanted(spec) {
      if (spec.needs === 'baseline') return D.diffs.length > 0;
      if (spec.needs === 'measured') return !!ME.series[spec.series[0].signal];
      if (spec.needs === 'params') return !!ME.per_tensor && sourceOf(spec.series[0].signal).present(spec.series[0].signal);
      return true;
    }
    function smoothed(spec) { return spec.series.some(function (s) { return s.smooth; }); }
    function tensorStat(spec) {  // the per-tensor statistic whose tensors the panel's selector picks, or null
      var s = spec.series[0];
      return s && s.per === 'tensor' && s.signal.indexOf('params.') === 0 ? field(s.signal) : null;
    }
    // a difference panel's float-rounding verdict (python's): for the signal of its first series
    function rounding(spec) {
      var d = D.diffs[0];
      return d && spec.y_range === 'symmetric' ? d.rounding[field(spec.series[0].signal)] : null;
    }
    function yHow(spec, log) {
      var r = rounding(spec);
      return { log: log, fromZero: spec.y_range === 'zero', symmetric: spec.y_range === 'symmetric',
               bound: r && r.within ? r.bound : null };
    }

    // reference lines (drawn under the data, labelled in the legend, never on the plot), by registry name
    var REFS = {
      ngram: function () {
        return isNum(D.ngram_val_loss) ? [{ y: D.ngram_val_loss, label: 'n-gram val loss ' + fmt(D.ngram_val_loss, 4), color: '#333333', dash: [7, 4] }] : [];
      },
      untrained: function () {  // the loss of a uniform guess over the vocabulary
        var v = CFG.vocab_size;
        return [{ y: Math.log(v), label: 'ln ' + v + ' = ' + fmt(Math.log(v), 4) + ' (untrained)', color: '#8a93a0', dash: [2, 3] }];
      },
      clip: function () {  // analysis says whether the run clips (null: clipping off)
        var c = RULES.clip_threshold;
        return isNum(c) ? [{ y: c, label: 'clip threshold ' + c, color: '#cf222e', dash: [6, 3] }] : [];
      },
      zero: function () { return [{ y: 0, label: 'zero', color: '#888888', dash: [], nolegend: true }]; },
      rounding: function (spec) {
        var r = rounding(spec);
        return r && r.within ? [{ y: r.bound, label: 'float32 rounding bound \u00b1' + fmt(r.bound, 2), color: '#2da44e', dash: [3, 3] },
                                { y: -r.bound, label: '', color: '#2da44e', dash: [3, 3], nolegend: true }] : [];
      },
      v_factor_band: function () {
        if (!SIG || !SIG.v_factor_band) return [];
        var b = SIG.v_factor_band, nz = SIG.v_factor_noise;
        return [{ y: b[1], label: '\u00a76.1 bounds x' + fmt(b[0], 6) + ' .. x' + fmt(b[1], 6), color: '#cf222e', dash: [6, 3] },
                { y: b[0], label: '', color: '#cf222e', dash: [6, 3], nolegend: true },
                { y: nz[1], label: 'rounding noise of this run (99th percentile) x' + fmt(nz[0], 6) + ' .. x' + fmt(nz[1], 6), color: '#2da44e', dash: [3, 3] },
                { y: nz[0], label: '', color: '#2da44e', dash: [3, 3], nolegend: true }];
      },
      attn_logit_high: function () { return threshold('attn_logit_high', '\u00a72.6 threshold'); },
      attn_entropy_low: function () { return threshold('attn_entropy_low', 'entropy collapse at'); },
      logz_far: function () {
        var t = (D.thresholds || {}).logz_far;
        return isNum(t) ? [{ y: t, label: '\u00a72.7 |log Z| threshold ' + t, color: '#cf222e', dash: [6, 3] },
                           { y: -t, label: '', color: '#cf222e', dash: [6, 3], nolegend: true }] : [];
      },
      rms_high: function () { return threshold('rms_high', '\u00a72.8 threshold'); },
      g_all_thresholds: function () {
        if (!SIG || !SIG.g_all_thresholds) return [];
        return [{ y: SIG.g_all_thresholds[1], label: '\u00a77.1 threshold ' + SIG.g_all_thresholds[1] + '\u03c3', color: '#cf222e', dash: [6, 3] },
                { y: SIG.g_all_thresholds[0], label: '\u00a77.2 threshold ' + SIG.g_all_thresholds[0] + '\u03c3', color: '#9a6700', dash: [6, 3] }];
      },
    };
    // a tree threshold as a reference line (the page data's `thresholds`, from analysis/thresholds.py)
    function threshold(name, words) {
      var t = (D.thresholds || {})[name];
      return isNum(t) ? [{ y: t, label: words + ' ' + t, color: '#cf222e', dash: [6, 3] }] : [];
    }
    function refsOf(spec) {
      var out = [];
      spec.refs.forEach(function (name) { out = out.concat(REFS[name](spec)); });
      return out;
    }

    // the line under a panel's title, by registry name
    var NOTES = {
      difference: function (spec) {
        var d = D.diffs[0], r = rounding(spec), fd = d.first_difference, first = ME.steps[0];
        var txt = ME.name + ' minus ' + d.baseline + ', step by step: ' + (fd === null ? 'identical at every shared step' :
          fd > first ? 'exactly 0 for steps ' + first + '\u2013' + (fd - 1) + ' (shared trunk); first difference at step ' + fd : 'differs from the first shared step');
        if (r && r.within) txt = 'identical up to float rounding: the largest |\u0394| is ' + fmt(r.max_abs, 3) +
          ', below the float32 rounding bound (' + fmt(r.bound, 3) + ' = ' + RULES.rounding + '). ' + txt;
        return txt;
      },
      movers: function (spec) {
        return 'shown: the ' + (D.movers[tensorStat(spec)] || []).length + ' tensors that move most (x = largest ratio to the median of ' +
          'their own previous ' + RULES.movers_lookback + ' steps, ' + D.movers_rule + '); the selector adds any tensor';
      },
      clipping: function (spec) {
        var n = 0, tot = 0, on = ME.series[spec.strip], g = ME.series[spec.series[0].signal];
        on.forEach(function (c, i) { if (isNum(g[i])) { tot++; n += c; } });
        return 'global L2 norm every step (not aggregated); orange marks along the bottom: clipping engaged (' + n + ' of ' + tot + ' steps)';
      },
      v_factor: function () {
        return '\u00a76.1: Adam obeys v_t = \u03b22\u00b7v_(t-1) + (1-\u03b22)\u00b7g_t\u00b2; f is the factor by which a tensor\u2019s v moved beyond that (\u03b22 fitted from the run: ' + SIG.v_factor_beta2 + '), for the tensor farthest from 1 at each step';
      },
      g_all: function () {
        return '\u00a77.1 / \u00a77.2: each tensor\u2019s log gradient norm over its own ' + RULES.robust_window + '-step trailing median, the batch loss\u2019s own jump taken out, in \u03c3 of that tensor\u2019s own trailing noise (robust z); every tensor jumped when even the smallest is high (and fell when even the largest is low)';
      },
    };
    function noteOf(spec) { return spec.note ? NOTES[spec.note](spec) : ''; }

    return { seriesOf: seriesOf, refsOf: refsOf, noteOf: noteOf, wanted: wanted, smoothed: smoothed,
             tensorStat: tensorStat, yHow: yHow, allRuns: allRuns, runColor: runColor, me: ME };
  }

  return { create: create };
})();
