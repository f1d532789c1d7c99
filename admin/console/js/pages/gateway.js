// Service accounts, the organization's own routes (providers and models only it sees), and the
// gateway operators' pages: the route catalog (providers, models, versions, restore) and an
// organization's gateway-credential quota.
import { h } from '../dom.js';
import { del, get, post, put } from '../api.js';
import { announce, btn, danger, dl, fmt, form, loaded, note, page, pager, pre, section, secretBox } from '../widgets.js';

export function serviceAccounts() {
  const shown = h('div');
  const list = pager({
    caption: 'Service accounts',
    load: (cursor) => get('/service-accounts', { cursor }),
    columns: [
      { label: 'Name', value: (a) => a.name },
      { label: 'Role', value: (a) => a.role },
      { label: 'Scopes', value: (a) => (a.scopes && a.scopes.length ? a.scopes.join(', ') : 'all the role allows') },
      { label: 'Token', value: (a) => h('code', {}, a.token_prefix) },
      { label: 'Status', value: (a) => a.status },
      { label: 'Expires', value: (a) => fmt.time(a.expires_at) },
      { label: 'Last used', value: (a) => fmt.time(a.last_used_at) },
      { label: '', value: (a) => (a.status === 'active' ? danger('Revoke', async () => { await del(`/service-accounts/${a.id}`); list.reload(); }, `Revoke ${a.name}`) : null) },
    ],
  });
  return page(
    'Service accounts',
    note('Tokens for automation (CI, infrastructure as code) on /api/v1; owners manage them.'),
    section('Accounts', list),
    section('Create a service account', shown, form({
      label: 'Create service account',
      submit: 'Create account',
      fields: [
        { name: 'name', label: 'Name', required: true },
        { name: 'role', label: 'Role', type: 'select', options: ['viewer', 'member', 'admin'], value: 'viewer' },
        { name: 'scopes', label: 'Scopes (comma-separated, e.g. teams:read, api-keys:write; empty: all)', type: 'list' },
        { name: 'expires_in_days', label: 'Expires in (days, 1–732; empty: never)', type: 'number', min: 1, max: 732 },
      ],
      onSubmit: (v) => post('/service-accounts', v),
      onDone: (a, el) => {
        el.reset();
        shown.replaceChildren(secretBox(`Token of ${a.name}`, a.token, a.warning));
        list.reload();
      },
    })),
  );
}

export function orgRoutes() {
  return page('Own providers and models', loaded(() => get('/organizations/current/routes'), (r, reload) => [
    note('Providers (with your provider keys) and models only your organization sees, as in docs/routes.md.'),
    dl([['Version', String(r.version)], ['Updated', fmt.time(r.updated_at)]]),
    section('Document', form({
      label: 'Organization routes',
      submit: 'Save routes',
      catchAll: 'document',
      fields: [{ name: 'document', label: 'Providers and models (JSON)', type: 'json', rows: 16, required: true, value: { providers: r.providers, models: r.models } }],
      onSubmit: (v) => put('/organizations/current/routes', { ...v.document, version: r.version }),
      onDone: (out) => {
        announce(`Saved as version ${out.version}.`);
        reload();
      },
    })),
  ]));
}

export function gateway() {
  const providers = pager({
    caption: 'Providers',
    load: (cursor) => get('/gateway/providers', { cursor }),
    columns: [
      { label: 'Name', value: (p) => p.name },
      { label: 'Kind', value: (p) => p.kind },
      { label: 'Base URL', value: (p) => p.base_url },
      { label: 'Region', value: (p) => p.region },
      { label: '', value: (p) => danger(`Delete ${p.name}`, async () => { await del(`/gateway/providers/${encodeURIComponent(p.name)}`); providers.reload(); }) },
    ],
  });
  const models = pager({
    caption: 'Models',
    load: (cursor) => get('/gateway/models', { cursor }),
    columns: [
      { label: 'Name', value: (m) => m.name },
      { label: 'Strategy', value: (m) => m.strategy },
      { label: 'Deployments', value: (m) => (m.deployments || []).map((d) => (d.model ? `${d.provider}/${d.model}` : d.provider)).join(', ') },
      { label: 'Fallbacks', value: (m) => (m.fallbacks || []).join(', ') },
      { label: '', value: (m) => danger(`Delete ${m.name}`, async () => { await del(`/gateway/models/${encodeURIComponent(m.name)}`); models.reload(); }) },
    ],
  });
  const versions = pager({
    caption: 'Catalog versions',
    load: (cursor) => get('/gateway/routes/versions', { cursor }),
    columns: [
      { label: 'Version', value: (v) => String(v.version) },
      { label: 'Change', value: (v) => v.change },
      { label: 'When', value: (v) => fmt.time(v.created_at) },
      { label: '', value: (v) => btn(`Restore ${v.version}`, async () => {
        try {
          await post(`/gateway/routes/versions/${v.version}/restore`);
          announce(`Version ${v.version} restored.`);
          versions.reload();
        } catch (e) {
          announce(e.message);
        }
      }) },
    ],
  });
  const quota = h('div');
  return page(
    'Gateway (operators)',
    note('The gateway-wide route catalog and quotas: gateway operators only (others get 403).'),
    section('Providers', providers, form({
      label: 'Add provider',
      submit: 'Add provider',
      fields: [{ name: 'doc', label: 'Provider (JSON)', type: 'json', rows: 5, required: true, value: { name: 'my-openai', kind: 'openai', base_url: 'https://api.openai.com/v1', api_key_env: 'OPENAI_API_KEY' } }],
      catchAll: 'doc',
      onSubmit: (v) => post('/gateway/providers', v.doc),
      onDone: () => providers.reload(),
    })),
    section('Models', models, form({
      label: 'Add model',
      submit: 'Add model',
      fields: [{ name: 'doc', label: 'Model (JSON)', type: 'json', rows: 6, required: true, value: { name: 'my-model', deployments: [{ provider: 'my-openai', model: 'gpt-4o-mini' }] } }],
      catchAll: 'doc',
      onSubmit: (v) => post('/gateway/models', v.doc),
      onDone: () => models.reload(),
    })),
    section('Catalog versions', versions),
    section('An organization’s quota', form({
      label: 'Find quota',
      inline: true,
      submit: 'Show quota',
      fields: [{ name: 'org_id', label: 'Organization id', required: true }],
      onSubmit: (v) => get(`/gateway/organizations/${encodeURIComponent(v.org_id || '')}/quota`).then((q) => ({ q, id: v.org_id })),
      onDone: ({ q, id }) => quota.replaceChildren(dl([['Plan', q.plan], ['In force', q.source]]), pre(q.effective), form({
        label: 'Set quota',
        submit: 'Set override',
        catchAll: 'quota',
        fields: [{ name: 'quota', label: 'Override (JSON: budget, rate_limits)', type: 'json', rows: 6, value: q.override || {} }],
        onSubmit: (v) => put(`/gateway/organizations/${id}/quota`, v.quota),
        onDone: () => announce('Quota saved.'),
      }), danger('Remove override', async () => { await del(`/gateway/organizations/${id}/quota`); announce('Override removed.'); })),
    }), quota),
  );
}
