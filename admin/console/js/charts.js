// Charts as plain SVG built from data (no chart library to ship, nothing inline for the CSP),
// each with its numbers in a table beside it for screen readers and for copying.
import { h, s, uid } from './dom.js';

const W = 560;
const H = 200;
const PAD = { l: 72, r: 12, t: 12, b: 40 };

function scale(max) {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

function axis(top, format) {
  const out = [];
  for (let i = 0; i <= 4; i += 1) {
    const v = (top * i) / 4;
    const y = PAD.t + (H - PAD.t - PAD.b) * (1 - i / 4);
    out.push(s('line', { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y, class: 'grid' }));
    out.push(s('text', { x: PAD.l - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' }, format(v)));
  }
  return out;
}

function figure(title, svg, rows, format) {
  const id = uid('chart');
  return h(
    'figure',
    { class: 'chart', 'aria-labelledby': id },
    h('figcaption', { id }, title),
    svg,
    h(
      'details',
      {},
      h('summary', {}, `${title}: the numbers`),
      h('table', {}, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'When / what'), h('th', { scope: 'col' }, 'Value'))),
        h('tbody', {}, rows.map((r) => h('tr', {}, h('td', {}, r.label), h('td', {}, format(r.value)))))),
    ),
  );
}

function label(text) {
  const t = String(text ?? '—');
  return t.length > 14 ? `${t.slice(0, 13)}…` : t;
}

/** Bars, one per `{label, value}`. */
export function barChart({ title, data, format = String }) {
  const top = scale(Math.max(0, ...data.map((d) => Number(d.value) || 0)));
  const inner = W - PAD.l - PAD.r;
  const step = inner / Math.max(1, data.length);
  const bw = Math.min(48, step * 0.7);
  const svg = s(
    'svg',
    { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}: ${data.map((d) => `${d.label} ${format(d.value)}`).join(', ') || 'no data'}` },
    axis(top, format),
    data.map((d, i) => {
      const v = Number(d.value) || 0;
      const bh = ((H - PAD.t - PAD.b) * v) / top;
      const x = PAD.l + step * i + (step - bw) / 2;
      return [
        s('rect', { x, y: H - PAD.b - bh, width: bw, height: Math.max(bh, v > 0 ? 1 : 0), class: 'bar' },
          s('title', {}, `${d.label}: ${format(v)}`)),
        s('text', { x: x + bw / 2, y: H - PAD.b + 16, 'text-anchor': 'middle', class: 'tick' }, label(d.label)),
      ];
    }),
  );
  return figure(title, svg, data, format);
}

/** Lines over ordered `{label, value}` points; `series`: several named lines. */
export function lineChart({ title, series, format = String }) {
  const all = series.flatMap((x) => x.points);
  const top = scale(Math.max(0, ...all.map((p) => Number(p.value) || 0)));
  const n = Math.max(...series.map((x) => x.points.length), 1);
  const inner = W - PAD.l - PAD.r;
  const xAt = (i) => PAD.l + (n === 1 ? inner / 2 : (inner * i) / (n - 1));
  const yAt = (v) => H - PAD.b - ((H - PAD.t - PAD.b) * (Number(v) || 0)) / top;
  const labels = series[0] ? series[0].points : [];
  const svg = s(
    'svg',
    { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}: ${series.map((x) => `${x.name} ${x.points.map((p) => `${p.label} ${format(p.value)}`).join(', ')}`).join('; ') || 'no data'}` },
    axis(top, format),
    series.map((x, k) => [
      s('polyline', { points: x.points.map((p, i) => `${xAt(i)},${yAt(p.value)}`).join(' '), class: `line line-${k}` }),
      x.points.map((p, i) => s('circle', { cx: xAt(i), cy: yAt(p.value), r: 3.5, class: `dot line-${k}` },
        s('title', {}, `${x.name} ${p.label}: ${format(p.value)}`))),
    ]),
    labels.map((p, i) => (n <= 8 || i % Math.ceil(n / 8) === 0
      ? s('text', { x: xAt(i), y: H - PAD.b + 16, 'text-anchor': 'middle', class: 'tick' }, label(p.label))
      : null)),
  );
  const rows = series.flatMap((x) => x.points.map((p) => ({ label: `${x.name} ${p.label}`, value: p.value })));
  const legend = series.length > 1
    ? h('ul', { class: 'legend' }, series.map((x, k) => h('li', { class: `key-${k}` }, x.name)))
    : null;
  const fig = figure(title, svg, rows, format);
  if (legend) fig.insertBefore(legend, fig.children[2]);
  return fig;
}
