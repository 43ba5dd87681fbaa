/* live.js: a dashboard page served by `minitrain serve` (views/serve.py) follows its runs while they train.
 * Loaded after the page's own script, only in served pages. Every second it asks /api/steps for the last
 * step each run of the page has written; when one moved, it fetches the page data again (/api/payload) and
 * puts the new rows into the page's data in place (the page's panels read it when they draw), then redraws
 * every part of the page that depends on the data (the drawn panels, the status badge, the step range, the
 * health line, the walker's verdict): zoom, smoothing, hidden series and ticked runs stay as they are. One line at the top says
 * how far the runs are, or why they cannot be read now (a run folder deleted or damaged while served); it
 * keeps polling, so a run that comes back is followed again. window.__liveUpdates counts the redraws. */
(function () {
  'use strict';
  var dash = window.__dashboard;
  if (!dash || !window.fetch) return;
  var D = dash.data, query = window.location.search, seen = null, busy = false;
  var line = document.createElement('div');
  line.id = 'live-status'; line.className = 'banner';
  document.getElementById('app').insertBefore(line, document.getElementById('app').firstChild);
  window.__liveUpdates = 0;

  function say(text, bad) { line.textContent = text; line.className = 'banner' + (bad ? ' bad' : ''); }

  function getJson(url) {
    return fetch(url, { cache: 'no-store' }).then(function (res) {
      return res.json().then(function (body) {
        if (!res.ok || body.error) throw new Error(body.error || res.statusText);
        return body;
      });
    });
  }

  // the fresh payload's rows into the page's own objects (panels.js holds D.runs[i] and D.checks.signals)
  function merge(P) {
    P.runs.forEach(function (fresh) {
      var mine = D.runs.filter(function (r) { return r.name === fresh.name; })[0];
      if (!mine) return;
      mine.steps = fresh.steps; mine.series = fresh.series;
      if (fresh.per_tensor) mine.per_tensor = fresh.per_tensor;
    });
    ['diffs', 'markers', 'movers', 'movers_rule', 'spikes', 'status', 'data_note', 'health', 'results'].forEach(function (k) { D[k] = P[k]; });
    if (D.checks && P.checks && P.checks.signals) {  // panels.js holds the signals object: filled in place
      var sig = D.checks.signals;
      Object.keys(P.checks.signals).forEach(function (k) { sig[k] = P.checks.signals[k]; });
      Object.keys(P.checks).forEach(function (k) { if (k !== 'signals') D.checks[k] = P.checks[k]; });
    } else D.checks = P.checks;
    var lo = Infinity, hi = -Infinity;
    D.runs.forEach(function (r) { if (r.steps.length) { lo = Math.min(lo, r.steps[0]); hi = Math.max(hi, r.steps[r.steps.length - 1]); } });
    if (lo <= hi) dash.state.full = [lo, Math.max(hi, lo + 1)];
    dash.refresh();  // the badge, the step range, the health line and the verdict too
    window.__liveUpdates += 1;
  }

  function describe(steps) {
    return Object.keys(steps).map(function (run) {
      var s = steps[run];
      return run + ': step ' + (s.last === null ? 'none yet' : s.last) + (s.live ? ' (training)' : '');
    }).join(' \u00b7 ');
  }

  function tick() {
    if (busy) return;
    busy = true;
    getJson('/api/steps' + query).then(function (steps) {
      var key = JSON.stringify(steps);
      var live = Object.keys(steps).some(function (r) { return steps[r].live; });
      if (key === seen) { say((live ? 'live: ' : 'served: ') + describe(steps)); return null; }
      seen = key;  // (the first time too: rows may have come between the page's build and this poll)
      return getJson('/api/payload' + query).then(function (P) {
        merge(P);
        say((live ? 'live: ' : 'served: ') + describe(steps) + ' \u00b7 updated ' + new Date().toLocaleTimeString());
      });
    }).catch(function (e) {
      seen = '';  // redraw once the run can be read again
      say('this page cannot follow its runs now: ' + e.message + ' (still trying)', true);
    }).then(function () { busy = false; });
  }
  tick();
  setInterval(tick, 1000);
})();
