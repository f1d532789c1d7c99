// The interactive API reference, rendered from the OpenAPI document gw-admin serves
// (`/api/v1/openapi.json`): every operation with its role, parameters, body and answers, and a
// form that sends it with the console's session.
import { h } from '../dom.js';
import { api, currentSession } from '../api.js';
import { errorBox, fmt, loaded, note, page, pre, section, table } from '../widgets.js';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

function resolve(doc, schema, depth = 0) {
  if (!schema || depth > 4) return schema;
  if (schema.$ref) {
    const name = schema.$ref.split('/').pop();
    return resolve(doc, doc.components.schemas[name], depth + 1);
  }
  return schema;
}

/** A compact outline of a schema: field → type (and description's first line). */
function outline(doc, schema, depth = 0) {
  const s = resolve(doc, schema);
  if (!s || depth > 2) return s && s.type ? s.type : 'object';
  if (s.allOf) return Object.assign({}, ...s.allOf.map((x) => outline(doc, x, depth)).filter((x) => typeof x === 'object'));
  if (s.oneOf || s.anyOf) return (s.oneOf || s.anyOf).map((x) => (x.type === 'null' ? 'null' : outline(doc, x, depth + 1)));
  if (s.type === 'array' || s.items) return [outline(doc, s.items, depth + 1)];
  if (s.properties) {
    return Object.fromEntries(Object.entries(s.properties).map(([k, v]) => {
      const r = resolve(doc, v);
      const text = r && (r.properties || r.allOf) ? outline(doc, r, depth + 1) : `${[].concat(r && r.type ? r.type : 'object').join(' | ')}${v.description || (r && r.description) ? ` — ${(v.description || r.description).split('\n')[0]}` : ''}`;
      return [k, text];
    }));
  }
  return s.type || 'object';
}

function operation(doc, path, method, op) {
  const body = h('div');
  const item = h('details', { class: 'op' }, h('summary', {}, h('span', { class: `method m-${method}` }, method.toUpperCase()), ' ', h('code', {}, path), ' ', op.summary || ''));
  item.addEventListener('toggle', () => {
    if (!item.open || body.childElementCount) return;
    const params = (op.parameters || []);
    const reqSchema = op.requestBody && op.requestBody.content && Object.values(op.requestBody.content)[0];
    const answers = Object.entries(op.responses || {});
    body.append(
      op.description ? h('p', { class: 'desc' }, op.description) : null,
      h('p', {}, 'Least role: ', h('code', {}, op['x-gw-role'] || 'any')),
      params.length ? table({ caption: 'Parameters', columns: [
        { label: 'Name', value: (p) => h('code', {}, p.name) }, { label: 'In', value: (p) => p.in },
        { label: 'Required', value: (p) => (p.required ? 'yes' : 'no') }, { label: 'About', value: (p) => p.description || '' },
      ], rows: params }) : null,
      reqSchema ? [h('h4', {}, 'Body'), pre(outline(doc, reqSchema.schema))] : null,
      h('h4', {}, 'Answers'),
      h('ul', {}, answers.map(([code, r]) => h('li', {}, h('code', {}, code), ` ${r.description || ''}`))),
      tryIt(path, method, params, Boolean(reqSchema), op['x-gw-role'] === 'public'),
    );
    item.append(body);
  });
  return item;
}

function tryIt(path, method, params, hasBody, publicOp) {
  const out = h('div', { 'aria-live': 'polite' });
  const inputs = new Map();
  const fields = [];
  const mk = (name, label, multiline) => {
    const id = `try-${method}-${path}-${name}`.replace(/[^a-zA-Z0-9-]/g, '-');
    const el = multiline ? h('textarea', { id, rows: 5, spellcheck: 'false' }) : h('input', { id, type: 'text' });
    inputs.set(name, el);
    fields.push(h('div', { class: 'field' }, h('label', { for: id }, label), el));
  };
  for (const p of params.filter((x) => x.in === 'path')) mk(`path:${p.name}`, `${p.name} (path)`);
  if (params.some((x) => x.in === 'query')) mk('query', 'Query string (a=1&b=2)');
  if (hasBody) mk('body', 'Body (JSON)', true);
  const send = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Send');
  const f = h('form', { class: 'form try', 'aria-label': `Try ${method.toUpperCase()} ${path}` }, h('h4', {}, 'Try it'),
    currentSession() ? null : note('Sign in to the console to send requests with your session.'), fields, h('div', { class: 'row' }, send), out);
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let p = path.replace(/^\/api\/v1/, '');
    for (const [k, el] of inputs) if (k.startsWith('path:')) p = p.replace(`{${k.slice(5)}}`, encodeURIComponent(el.value));
    if (inputs.has('query') && inputs.get('query').value) p += `?${inputs.get('query').value.replace(/^\?/, '')}`;
    let payload;
    if (inputs.has('body') && inputs.get('body').value.trim()) {
      try {
        payload = JSON.parse(inputs.get('body').value);
      } catch (e) {
        out.replaceChildren(errorBox(new Error(`the body is not valid JSON (${e.message})`)));
        return;
      }
    }
    try {
      // A public operation (sign-in, say) answering 401 says nothing of the console's session.
      const r = await api(method.toUpperCase(), p, payload, { noRefresh: publicOp });
      out.replaceChildren(h('p', {}, 'Answer:'), pre(r === null ? '(no content)' : r));
    } catch (e) {
      out.replaceChildren(errorBox(e));
    }
  });
  return f;
}

export function page_() {
  return page('API reference', loaded(async () => (await fetch('/api/v1/openapi.json', { headers: { accept: 'application/json' } })).json(), (doc) => {
    const byTag = new Map();
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const m of METHODS) {
        if (!ops[m]) continue;
        const tag = (ops[m].tags && ops[m].tags[0]) || 'other';
        if (!byTag.has(tag)) byTag.set(tag, []);
        byTag.get(tag).push(operation(doc, path, m, ops[m]));
      }
    }
    return [
      note(`${doc.info.title} ${doc.info.version}: ${fmt.num([...byTag.values()].reduce((n, x) => n + x.length, 0))} operations. The document itself: /api/v1/openapi.json.`),
      h('p', {}, h('a', { href: '/api/v1/openapi.json' }, 'Download the OpenAPI document')),
      [...byTag.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([tag, ops]) => section(tag, ops)),
    ];
  }));
}

export { page_ as page };
