// The console's building blocks: pages, sections, forms with errors at their fields, tables,
// pagination, one-time secrets with a copy button, and number formats.
import { h, clear, uid } from './dom.js';
import { ApiError } from './api.js';

export const fmt = {
  money(v) {
    if (v === null || v === undefined || v === '') return '—';
    return `$${v}`;
  },
  time(v) {
    if (!v) return '—';
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? String(v) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  },
  pct(v) {
    return v === null || v === undefined ? '—' : `${(Number(v) * 100).toFixed(1)}%`;
  },
  ms(v) {
    if (v === null || v === undefined) return '—';
    const n = Number(v);
    return n < 10 ? `${Number(n.toFixed(1))} ms` : `${Math.round(n)} ms`;
  },
  num(v) {
    return v === null || v === undefined ? '—' : Number(v).toLocaleString('en-US');
  },
  json(v) {
    return JSON.stringify(v, null, 2);
  },
  /** Dollars on a chart's axis: a few significant digits, however small. */
  usd(v) {
    const n = Number(v) || 0;
    if (n === 0) return '$0';
    return n < 1 ? `$${n.toPrecision(2)}` : `$${n.toFixed(2)}`;
  },
};

/** Announces `text` to screen readers and shows it in the status line. */
export function announce(text) {
  const el = document.getElementById('status');
  if (!el) return;
  el.textContent = '';
  clearTimeout(announceTimer);
  // A fresh text node, so the same message twice is announced twice; gone after a while.
  setTimeout(() => {
    el.textContent = text;
    announceTimer = setTimeout(() => {
      el.textContent = '';
    }, 8000);
  }, 20);
}

let announceTimer = 0;

/** A page: its heading (the document's title too) and content. */
export function page(title, ...kids) {
  document.title = `${title} · gw console`;
  return [h('h1', { id: 'page-title', tabindex: '-1' }, title), ...kids];
}

export function section(title, ...kids) {
  const id = uid('s');
  return h('section', { 'aria-labelledby': id, class: 'card' }, h('h2', { id }, title), ...kids);
}

export function note(text, kind = 'info') {
  return h('p', { class: `note note-${kind}` }, text);
}

export function errorBox(err) {
  const box = h('div', { class: 'note note-error', role: 'alert' });
  fillError(box, err);
  return box;
}

function fillError(box, err, unplaced) {
  clear(box);
  if (!err) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  const msg = err instanceof ApiError ? err.message : String(err.message || err);
  box.append(h('strong', {}, err instanceof ApiError ? `${err.status} ${err.code}: ` : 'Error: '), msg);
  const rest = unplaced || (err instanceof ApiError ? err.fields : []);
  if (rest.length) {
    box.append(h('ul', {}, rest.map((f) => h('li', {}, h('code', {}, f.field), `: ${f.message}`))));
  }
}

export function btn(label, onclick, opts = {}) {
  return h(
    'button',
    {
      type: opts.type || 'button',
      class: `btn btn-${opts.kind || 'secondary'}`,
      onclick,
      'aria-label': opts.aria,
      disabled: opts.disabled,
    },
    label,
  );
}

/** A button that asks once more before a destructive action. */
export function danger(label, action, aria) {
  let armed = false;
  const b = btn(label, async () => {
    if (!armed) {
      armed = true;
      b.textContent = `Confirm: ${label.toLowerCase()}`;
      if (aria) b.setAttribute('aria-label', `Confirm: ${aria}`);
      b.classList.add('armed');
      return;
    }
    b.disabled = true;
    try {
      await action();
    } catch (e) {
      announce(`Not done: ${e.message}`);
    } finally {
      b.disabled = false;
    }
  }, { kind: 'danger', aria });
  b.addEventListener('blur', () => {
    armed = false;
    b.textContent = label;
    if (aria) b.setAttribute('aria-label', aria);
    b.classList.remove('armed');
  });
  return b;
}

export function dl(pairs) {
  return h(
    'dl',
    { class: 'facts' },
    pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v === null || v === undefined || v === '' ? '—' : v)]),
  );
}

export function pre(value) {
  return h('pre', { class: 'code', tabindex: '0' }, typeof value === 'string' ? value : fmt.json(value));
}

/** A table; `columns`: `[{label, value: row => text or Node}]`. */
export function table({ caption, columns, rows, empty }) {
  if (!rows.length) return note(empty || 'Nothing here yet.');
  return h(
    'div',
    { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': caption },
    h(
      'table',
      {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c.label)))),
      h(
        'tbody',
        {},
        rows.map((r) => h('tr', {}, columns.map((c) => h('td', { 'data-label': c.label }, cell(c.value(r)))))),
      ),
    ),
  );
}

function cell(v) {
  if (v === null || v === undefined || v === '') return '—';
  return v;
}

/** A paginated list: `load(cursor)` answers `{data, next_cursor}`. */
export function pager({ load, caption, columns, empty }) {
  const box = h('div', { class: 'pager' });
  const cursors = [null];
  let at = 0;
  async function show() {
    // A page turn or a row's action removes the focused button: focus goes to the new table.
    const hadFocus = box.contains(document.activeElement);
    clear(box).append(h('p', { class: 'muted' }, 'Loading…'));
    try {
      const p = await load(cursors[at]);
      const nav = h('div', { class: 'row' });
      if (at > 0) {
        nav.append(btn('Previous page', () => { at -= 1; show(); }));
      }
      if (p.next_cursor) {
        cursors[at + 1] = p.next_cursor;
        nav.append(btn('Next page', () => { at += 1; show(); }));
      }
      clear(box).append(table({ caption, columns, rows: p.data, empty }), nav);
      if (hadFocus) {
        const target = box.querySelector('.table-wrap') || box.querySelector('p');
        if (target) {
          if (!target.hasAttribute('tabindex')) target.setAttribute('tabindex', '-1');
          target.focus();
        }
      }
    } catch (e) {
      clear(box).append(errorBox(e));
    }
  }
  show();
  box.reload = () => {
    cursors.length = 1;
    at = 0;
    return show();
  };
  return box;
}

/** A secret shown once, with a copy button and the warning. */
export function secretBox(label, secret, warning) {
  const id = uid('secret');
  const input = h('input', { id, type: 'text', readonly: true, value: secret, class: 'secret', spellcheck: 'false' });
  const done = h('span', { class: 'muted', 'aria-live': 'polite' });
  return h(
    'div',
    { class: 'note note-warn', role: 'group', 'aria-label': label },
    h('label', { for: id }, label),
    h('div', { class: 'row' }, input, btn('Copy', async () => {
      try {
        await navigator.clipboard.writeText(secret);
        done.textContent = 'Copied to the clipboard.';
      } catch {
        input.select();
        done.textContent = 'Select the text and copy it (the clipboard is not available).';
      }
    }, { kind: 'primary', aria: `Copy ${label}` }), done),
    h('p', {}, h('strong', {}, 'Shown once. '), warning || 'Store it now: it cannot be shown again.'),
  );
}

/**
 * A form. `fields`: `[{name, label, type, options, value, required, help, placeholder}]`;
 * types: text, email, password, number, url, select, textarea, json, list (comma-separated),
 * checkbox, datetime, date. `onSubmit(values)` may throw an `ApiError`: its `fields` are shown
 * at the inputs they name, the rest above.
 */
export function form({ fields, submit = 'Save', onSubmit, onDone, inline, label, catchAll }) {
  const general = h('div', { class: 'note note-error', role: 'alert', hidden: true });
  const inputs = new Map();
  const el = h('form', { class: inline ? 'form inline' : 'form', novalidate: true, 'aria-label': label });
  el.append(general);
  for (const f of fields) {
    const id = uid('f');
    const errId = `${id}-err`;
    const helpId = `${id}-help`;
    let input;
    const common = {
      id,
      name: f.name,
      required: f.required,
      'aria-describedby': [f.help ? helpId : '', errId].filter(Boolean).join(' '),
      placeholder: f.placeholder,
      autocomplete: f.autocomplete || (f.type === 'password' ? 'current-password' : 'off'),
    };
    if (f.type === 'checks') {
      // A group of checkboxes answering the checked values.
      input = h('fieldset', { id, class: 'checks', 'aria-describedby': common['aria-describedby'] }, h('legend', {}, f.label),
        (f.options || []).map((o) => {
          const cid = uid('c');
          return h('span', { class: 'check' }, h('input', { type: 'checkbox', id: cid, value: o, checked: (f.value || []).includes(o) }), h('label', { for: cid }, o));
        }));
    } else if (f.type === 'select') {
      input = h('select', common, (f.options || []).map((o) => {
        const [value, text] = Array.isArray(o) ? o : [o, o];
        return h('option', { value, selected: String(f.value ?? '') === String(value) }, text);
      }));
    } else if (f.type === 'textarea' || f.type === 'json') {
      input = h('textarea', { ...common, rows: f.rows || (f.type === 'json' ? 10 : 4), spellcheck: 'false' });
      input.value = f.type === 'json' && f.value !== undefined && typeof f.value !== 'string' ? fmt.json(f.value) : f.value ?? '';
    } else if (f.type === 'checkbox') {
      input = h('input', { ...common, type: 'checkbox', checked: f.value });
    } else {
      const type = { list: 'text', datetime: 'datetime-local' }[f.type] || f.type || 'text';
      input = h('input', { ...common, type, value: f.value ?? '', min: f.min, max: f.max, step: f.step });
    }
    inputs.set(f.name, { f, input, err: h('p', { id: errId, class: 'field-error' }) });
    const { err } = inputs.get(f.name);
    const help = f.help ? h('p', { id: helpId, class: 'help' }, f.help) : null;
    if (f.type === 'checks') {
      el.append(h('div', { class: 'field' }, input, help, err));
    } else if (f.type === 'checkbox') {
      el.append(h('div', { class: 'field check' }, input, h('label', { for: id }, f.label), help, err));
    } else {
      el.append(h('div', { class: 'field' }, h('label', { for: id }, f.label, f.required ? ' (required)' : ''), input, help, err));
    }
  }
  const submitBtn = h('button', { type: 'submit', class: 'btn btn-primary' }, submit);
  el.append(h('div', { class: 'row' }, submitBtn));
  el.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    for (const { input, err } of inputs.values()) {
      input.removeAttribute('aria-invalid');
      err.textContent = '';
    }
    fillError(general, null);
    const values = {};
    const local = [];
    for (const [name, { f, input }] of inputs) {
      const v = read(f, input, local);
      if (v !== undefined) values[name] = v;
    }
    if (local.length) {
      show(new ApiError(400, { error: { code: 'validation_error', message: 'Check the marked fields.', fields: local } }));
      return;
    }
    submitBtn.disabled = true;
    try {
      const out = await onSubmit(values);
      if (onDone) onDone(out, el);
    } catch (e) {
      show(e);
    } finally {
      submitBtn.disabled = false;
    }
  });
  function show(e) {
    const unplaced = [];
    let first = null;
    for (const fe of e instanceof ApiError ? e.fields : []) {
      const hit = [...inputs.keys()].find((n) => fe.field === n || fe.field.startsWith(`${n}.`) || fe.field.startsWith(`${n}[`));
      if (hit) {
        const { input, err } = inputs.get(hit);
        input.setAttribute('aria-invalid', 'true');
        err.textContent = fe.field === hit ? fe.message : `${fe.field}: ${fe.message}`;
        first = first || input;
      } else if (catchAll && inputs.has(catchAll)) {
        // A document editor: errors name paths inside the document, shown at the editor.
        const { input, err } = inputs.get(catchAll);
        input.setAttribute('aria-invalid', 'true');
        err.append(h('span', { class: 'err-line' }, `${fe.field}: ${fe.message}`));
        first = first || input;
      } else {
        unplaced.push(fe);
      }
    }
    fillError(general, e, unplaced);
    (first || general).focus?.();
    if (!first) general.setAttribute('tabindex', '-1');
    if (!first) general.focus();
  }
  el.inputs = inputs;
  return el;
}

function read(f, input, local) {
  const raw = input.value;
  switch (f.type) {
    case 'checks': {
      const on = [...input.querySelectorAll('input:checked')].map((c) => c.value);
      return on.length ? on : f.emptyAs;
    }
    case 'checkbox':
      return input.checked;
    case 'number':
      if (raw === '') return f.emptyAs;
      if (Number.isNaN(Number(raw))) {
        local.push({ field: f.name, message: 'must be a number' });
        return undefined;
      }
      return Number(raw);
    case 'json':
      if (raw.trim() === '') return f.emptyAs;
      try {
        return JSON.parse(raw);
      } catch (e) {
        local.push({ field: f.name, message: `is not valid JSON (${e.message})` });
        return undefined;
      }
    case 'list':
      return raw.trim() === '' ? f.emptyAs : raw.split(',').map((x) => x.trim()).filter(Boolean);
    case 'datetime':
      // The fields say UTC: the browser's zone must not move the time.
      return raw === '' ? f.emptyAs : new Date(`${raw}Z`).toISOString();
    default:
      return raw === '' ? f.emptyAs : raw;
  }
}

/** Renders what `load()` resolves to with `render`, showing progress and errors. */
export function loaded(load, render) {
  const box = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const run = async () => {
    try {
      const v = await load();
      clear(box).append(...[render(v, run)].flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
      focusTitle();
    } catch (e) {
      clear(box);
      // A page whose content failed still has its heading (keyboard users land on it).
      if (!document.getElementById('page-title')) box.append(...page('Not available'));
      box.append(errorBox(e));
      focusTitle();
    }
  };
  run();
  return box;
}

/** Moves the focus to the page's heading when a page rendered late and nothing has it yet. */
function focusTitle() {
  const title = document.getElementById('page-title');
  if (title && (document.activeElement === document.body || document.activeElement === null)) title.focus({ preventScroll: true });
}

/** Leaves for a URL the server gave (a provider's sign-in or checkout page): only http(s). */
export function leaveTo(url) {
  const u = new URL(url, window.location.href);
  if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new Error('refusing to open a non-HTTP address');
  window.location.assign(u.href);
}

/** Downloads what an authenticated GET answers, as a file. */
export async function download(res, fallback) {
  const blob = await res.blob();
  const cd = res.headers.get('content-disposition') || '';
  const m = /filename="([^"]+)"/.exec(cd);
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: m ? m[1] : fallback });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
