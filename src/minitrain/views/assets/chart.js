/* chart.js: the pages' charts, drawn with uPlot. create(): one dashboard panel: its aligned data table,
 * reference lines and markers, the clipping strip, the tooltip, wheel zoom and shift+drag pan, and its PNG/CSV
 * export. lines(): a plain chart of a few lines on one x axis (the runs table's comparison, the LR sweep). */
var chart = (function () {
  'use strict';
  var isNum = helpers.isNum, fmt = helpers.fmt, el = helpers.el;
  var MARK = { k: '#d1242f', warmup: '#8a93a0', nonfinite: '#000000', end: '#bf5700', diagnosis: '#8250df' };

  // D: the page data; state: {smooth, x, full}; zoomTo(a, b): every panel to steps a..b; series: panels.js
  function create(D, state, zoomTo, series) {
    var ME = D.runs[0];

    // one aligned data table for uPlot: the union of every line's steps, a column per line
    function table(list, log) {
      var xsSet = {}, xs = [];
      list.forEach(function (s) { s.x.forEach(function (x) { if (!xsSet[x]) { xsSet[x] = true; xs.push(x); } }); });
      xs.sort(function (a, b) { return a - b; });
      var pos = {}; xs.forEach(function (x, i) { pos[x] = i; });
      var data = [xs], cols = [{ label: 'step' }], meta = [null];
      function column(s, y) {
        var col = new Array(xs.length).fill(null);
        for (var i = 0; i < s.x.length; i++) {
          var v = y[i];
          if (isNum(v) && !(log && v <= 0)) col[pos[s.x[i]]] = v;
        }
        return col;
      }
      list.forEach(function (s) {
        if (s.smooth && state.smooth > 0) {  // the raw line faded under its smoothed line, as TensorBoard draws it
          data.push(column(s, s.y));
          cols.push({ label: s.label + ' (raw)', stroke: helpers.fade(s.color), width: 1, spanGaps: false, points: { show: false } });
          meta.push({ raw: true, of: s });
          data.push(column(s, helpers.ema(s.y, state.smooth)));
          cols.push({ label: s.label + ' (smoothed ' + state.smooth.toFixed(2) + ')', stroke: s.color, width: 2,
                      dash: s.dash || undefined, spanGaps: true, points: { show: false } });
          meta.push({ smoothed: true, of: s });
        } else {
          data.push(column(s, s.y));
          cols.push({ label: s.label, stroke: s.color, width: s.width, dash: s.dash || undefined, spanGaps: !!(s.sparse || s.span),
                      points: s.sparse ? { show: true, size: 5, fill: s.color } : { show: false } });
          meta.push({ of: s });
        }
      });
      return { data: data, series: cols, meta: meta };
    }

    // reference lines and the strip under the data, marker lines over it, marker labels above the plot area
    function decorations(spec, refs) {
      function drawLines(u) {
        var ctx = u.ctx, bb = u.bbox, px = uPlot.pxRatio;
        ctx.save();
        ctx.beginPath(); ctx.rect(bb.left, bb.top, bb.width, bb.height); ctx.clip();
        refs.forEach(function (l) {
          if (u.scales.y.distr === 3 && l.y <= 0) return;
          var y = u.valToPos(l.y, 'y', true);
          ctx.strokeStyle = l.color; ctx.lineWidth = 1.3 * px; ctx.setLineDash((l.dash || []).map(function (d) { return d * px; }));
          ctx.beginPath(); ctx.moveTo(bb.left, y); ctx.lineTo(bb.left + bb.width, y); ctx.stroke();
        });
        if (spec.strip) {  // one mark per step where the strip's signal is 1, along the bottom
          ctx.setLineDash([]); ctx.fillStyle = 'rgba(240,136,62,0.85)';
          var on = ME.series[spec.strip], st = ME.steps;
          for (var i = 0; i < st.length; i++) {
            if (!on[i] || st[i] < u.scales.x.min || st[i] > u.scales.x.max) continue;
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
      function drawLabels(u) {  // in the band above the plot area: no line crosses them
        var ctx = u.ctx, bb = u.bbox, px = uPlot.pxRatio, rows = [];
        ctx.save();
        ctx.font = 'bold ' + Math.round(10.5 * px) + 'px system-ui, sans-serif'; ctx.textBaseline = 'bottom'; ctx.textAlign = 'left';
        (D.markers || []).forEach(function (mk) {
          if (mk.step < u.scales.x.min || mk.step > u.scales.x.max) return;
          var text = spec.wide ? mk.label : mk.short;
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

    // The step the cursor reads (every line at the same step): in the pixel column under the cursor, the step
    // where some shown line is most extreme (helpers.columnStep), so zoomed out, a spike inside the column is
    // read and not the step beside it. uPlot asks per series (cursor.dataIdx); one answer per cursor position.
    function readStep(p) {
      var at = null, idx = null;
      return function (u, k, i0, xv) {
        if (k === 0 || i0 === null || i0 === undefined) return i0;
        var left = u.valToPos(xv, 'x');
        if (at !== null && at[0] === left && at[1] === i0 && at[2] === u.data) return idx;
        var cols = [];
        for (var j = 1; j < u.series.length; j++) if (u.series[j].show) cols.push(u.data[j]);
        // the pixel the crosshair is drawn on (left .. left + 1), widened by half a pixel each side: a mouse
        // position rounded either way still covers it
        idx = helpers.columnStep(u.data[0], cols, u.posToVal(left - 0.5, 'x'), u.posToVal(left + 1.5, 'x'), i0);
        at = [left, i0, u.data];
        return idx;
      };
    }

    // The tooltip stays inside its panel: placed beside the cursor, flipped to the other side at an edge, its
    // rows in columns when they are taller than the panel, and the smallest values left out (counted) when
    // even the columns do not fit.
    function placeTip(u, p, tip) {
      var over = u.over.getBoundingClientRect(), box = p.root.getBoundingClientRect(), pad = 4;
      var minX = box.left - over.left + pad, maxX = box.right - over.left - pad;
      var minY = box.top - over.top + pad, maxY = box.bottom - over.top - pad;
      var availW = maxX - minX, availH = maxY - minY;
      tip.style.maxWidth = availW + 'px';
      tip.style.columnCount = '';
      tip.style.left = minX + 'px'; tip.style.top = minY + 'px';  // measured where nothing squeezes it
      var fit = function () { return tip.offsetHeight <= availH && tip.offsetWidth <= availW; };
      for (var n = 2; !fit() && n <= 4; n++) tip.style.columnCount = String(n);
      var lines = tip.querySelectorAll('.trow'), hidden = 0, more = null;
      for (var i = lines.length - 1; i > 0 && !fit(); i--) {  // the smallest values go first
        lines[i].remove(); hidden++;
        if (!more) { more = el('div', 'tmore'); tip.appendChild(more); }
        more.textContent = '+ ' + hidden + ' more (hide lines in the legend to see them)';
      }
      var w = tip.offsetWidth, h = tip.offsetHeight;
      var x = u.cursor.left + 14, y = u.cursor.top + 14;
      if (x + w > maxX) x = u.cursor.left - w - 14;
      if (y + h > maxY) y = maxY - h;
      tip.style.left = Math.round(Math.min(Math.max(x, minX), maxX - w)) + 'px';
      tip.style.top = Math.round(Math.min(Math.max(y, minY), maxY - h)) + 'px';
    }

    // the values at the cursor's step, largest first (a sampled line: its last point at or before the step)
    function tooltip(p) {
      var tip;
      function init(u) { tip = el('div', 'tooltip'); tip.style.display = 'none'; u.over.appendChild(tip); }
      function setCursor(u) {
        if (u.cursor.idx === null || u.cursor.idx === undefined || u.cursor.left < 0) { tip.style.display = 'none'; return; }
        var xs = u.data[0], idxs = u.cursor.idxs || [], rows = [], i = u.cursor.idx;
        for (var j = 1; j < idxs.length; j++) if (u.series[j].show && idxs[j] !== null && idxs[j] !== undefined) { i = idxs[j]; break; }
        var step = xs[i];
        for (var k = 1; k < u.series.length; k++) {
          var s = u.series[k], m = p.meta[k];
          if (!s.show) continue;
          var pt = helpers.pointAt(xs, u.data[k], i, !!(m && m.of && (m.of.sparse || m.of.span)));
          if (pt) rows.push({ label: s.label, v: pt.y, at: pt.x, color: s.stroke });
        }
        rows.sort(function (a, b) { return b.v - a.v; });
        tip.textContent = '';
        tip.style.display = 'block';
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
        placeTip(u, p, tip);
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

    function width(p) { return Math.max(280, p.box.clientWidth); }

    // p: {spec, log, box, root, note, empty} (page.js); (re)draws its uPlot into p.box
    function draw(p) {
      p.drawn = true;
      p.box.style.minHeight = '';
      if (p.u) { p.u.destroy(); p.u = null; }
      var t = table(series.seriesOf(p.spec), p.log);
      p.meta = t.meta;
      p.refs = series.refsOf(p.spec);
      p.box.textContent = '';
      var empty = t.data.length < 2 || t.data[0].length === 0;
      p.empty.textContent = empty ? p.spec.empty : '';
      p.note.textContent = series.noteOf(p.spec);
      if (empty) return;
      var how = series.yHow(p.spec, p.log);
      var range = function (u, lo, hi) { return helpers.yRange(lo, hi, how); };
      var opts = {
        width: width(p), height: p.spec.wide ? 300 : 230,
        padding: [D.markers && D.markers.length ? 28 : 10, 14, 0, 0],
        cursor: { sync: { key: 'minitrain', setSeries: false }, drag: { x: true, y: false, setScale: false },
                  points: { size: 6 }, dataIdx: readStep(p) },
        select: { show: true },
        legend: { live: false },
        scales: { x: { time: false, range: function () { return state.x || state.full; } },
                  y: p.log ? { distr: 3, log: 10, range: range } : { range: range } },
        axes: [{ label: 'step', labelSize: 18, size: 34 },
               { label: p.spec.unit + (p.log ? ' (log)' : ''), labelSize: 18, size: 64,
                 values: p.log ? function (u, vals) { return helpers.logTickLabels(vals, u.scales.y.min, u.scales.y.max); }
                               : function (u, vals) { return vals.map(helpers.tick); } }],
        series: t.series,
        plugins: [decorations(p.spec, p.refs), tooltip(p), wheelAndPan()],
        hooks: {
          setSelect: [function (u) {
            // layout: a drag of a few pixels is a click, not a zoom
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

    function download(name, blob) {
      var a = el('a'); a.href = URL.createObjectURL(blob); a.download = name;
      document.body.appendChild(a); a.click(); a.remove();
      setTimeout(function () { URL.revokeObjectURL(a.href); }, 1000);
    }
    function fileName(p, ext) { return helpers.safeName(D.name) + '-panel' + p.spec.number + '-' + p.spec.key + '.' + ext; }
    function exportPng(p) {
      if (!p.u) return;
      var src = p.u.ctx.canvas, px = uPlot.pxRatio, head = Math.round(24 * px);
      var c = document.createElement('canvas'); c.width = src.width; c.height = src.height + head;
      var ctx = c.getContext('2d');
      ctx.fillStyle = '#ffffff'; ctx.fillRect(0, 0, c.width, c.height);
      ctx.fillStyle = '#1d2430'; ctx.font = 'bold ' + Math.round(13 * px) + 'px system-ui, sans-serif';
      ctx.fillText(p.spec.number + '. ' + p.spec.title + ' \u2014 ' + D.name, 8 * px, 17 * px);
      ctx.drawImage(src, 0, head);
      c.toBlob(function (b) { download(fileName(p, 'png'), b); }, 'image/png');
    }
    function exportCsv(p) {
      if (!p.u) return;
      var u = p.u, cols = u.series.map(function (s, k) { return k === 0 ? 'step' : s.label; });
      var q = function (s) { s = String(s); return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; };
      var lines = [cols.map(q).join(',')];
      for (var i = 0; i < u.data[0].length; i++) {
        lines.push(u.data.map(function (col) { return col[i] === null || col[i] === undefined ? '' : String(col[i]); }).join(','));
      }
      download(fileName(p, 'csv'), new Blob([lines.join('\n') + '\n'], { type: 'text/csv' }));
    }

    return { draw: draw, width: width, exportPng: exportPng, exportCsv: exportCsv };
  }

  // box: the element to draw in; spec: {x: [...], xLabel, yLabel, xLog, yLog, width, height,
  // lines: [{label, y (one value per x, null for none), color, points (dots), dotsOnly (no line), span (join gaps)}]}
  function lines(box, spec) {
    var data = [spec.x], series = [{ label: spec.xLabel }];
    spec.lines.forEach(function (l) {
      data.push(l.y.map(function (v) { return isNum(v) && !(spec.yLog && v <= 0) ? v : null; }));
      series.push({ label: l.label, stroke: l.color, width: l.dotsOnly ? 0 : 1.5, spanGaps: !!l.span,
                    points: { show: !!(l.points || l.dotsOnly), size: l.dotsOnly ? 9 : 5, fill: l.dotsOnly ? '#fff' : l.color } });
    });
    return new uPlot({ width: spec.width, height: spec.height || 220, series: series, legend: { live: false },
                       scales: { x: spec.xLog ? { time: false, distr: 3, log: 10 } : { time: false },
                                 y: spec.yLog ? { distr: 3, log: 10 } : {} },
                       axes: [{ label: spec.xLabel }, { size: 60, label: spec.yLabel }] }, data, box);
  }

  return { create: create, lines: lines };
})();
