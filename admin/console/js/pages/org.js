// The organization: settings, members and invites, teams (budgets, limits, policies, models,
// members, spend against budget), billing, single sign-on and the admin audit trail.
import { h } from '../dom.js';
import { del, get, patch, post } from '../api.js';
import { announce, btn, danger, dl, fmt, form, leaveTo, loaded, note, page, pager, section, secretBox } from '../widgets.js';

const PERIODS = [['month', 'month'], ['week', 'week'], ['day', 'day'], ['total', 'total']];
const ROLES = ['viewer', 'member', 'admin'];

/** Dotted form names (`budget.amount_usd`) into nested objects. */
export function nest(values) {
  const out = {};
  for (const [k, v] of Object.entries(values)) {
    const parts = k.split('.');
    let at = out;
    for (const p of parts.slice(0, -1)) at = at[p] || (at[p] = {});
    at[parts[parts.length - 1]] = v;
  }
  return out;
}

/** Budget and rate-limit fields, shared by organizations, teams and keys. */
export function limitFields(cur = {}) {
  const b = cur.budget || {};
  const r = cur.rate_limits || {};
  return [
    { name: 'budget.amount_usd', label: 'Budget (US dollars per period)', value: b.amount_usd, help: 'Empty: no budget.' },
    { name: 'budget.period', label: 'Budget period', type: 'select', options: PERIODS, value: b.period || 'month' },
    { name: 'rate_limits.rpm', label: 'Requests per minute', type: 'number', min: 1, value: r.rpm, help: 'Empty: no limit.' },
    { name: 'rate_limits.tpm', label: 'Tokens per minute', type: 'number', min: 1, value: r.tpm },
  ];
}

/**
 * The budget and rate limits of a submitted form, kept over what `cur` has (alert thresholds,
 * hard limit, concurrency and per-model limits are not on the form and stay as they are); an
 * empty amount clears the budget (`null`). With `cur`, only what changed is answered, so a save
 * never touches settings the form did not change.
 */
export function limitsOf(v, cur) {
  const n = nest(v);
  const out = {};
  const b = n.budget || {};
  out.budget = b.amount_usd ? { ...((cur && cur.budget) || {}), amount_usd: b.amount_usd, period: b.period } : null;
  const r = n.rate_limits || {};
  const rl = { ...((cur && cur.rate_limits) || {}), rpm: r.rpm ?? null, tpm: r.tpm ?? null };
  out.rate_limits = Object.values(rl).some((x) => x !== null && x !== undefined) ? rl : null;
  if (cur) {
    for (const k of ['budget', 'rate_limits']) {
      if (JSON.stringify(out[k]) === JSON.stringify(cur[k] ?? null)) delete out[k];
    }
  }
  return out;
}

/** Spend against a budget, as a meter with its numbers in words. */
export function spendMeter(spend, budget) {
  const used = Number(spend && spend.spend_usd) || 0;
  if (!budget) return `${fmt.money(spend ? spend.spend_usd : '0')} this ${spend ? spend.period : 'month'} (no budget)`;
  const max = Number(budget.amount_usd) || 0;
  const pct = max > 0 ? Math.min(100, (used / max) * 100) : 0;
  const text = `${fmt.money(spend ? spend.spend_usd : '0')} of ${fmt.money(budget.amount_usd)} per ${budget.period} (${pct.toFixed(1)}%)`;
  return h('span', { class: 'meter-wrap' }, h('meter', { min: 0, max: 100, value: pct, low: 80, high: 95, optimum: 0, 'aria-label': text }), ' ', text);
}

export function organization() {
  return page('Organization', loaded(() => Promise.all([get('/organizations/current'), get('/organizations/current/limits')]), ([o, limits], reload) => [
    section('Plan', dl([
      ['Name', o.name], ['Id', h('code', {}, o.id)], ['Plan', `${o.plan} (${o.plan_terms.name})`],
      ['Seats', o.plan_terms.seats === null ? 'no limit' : String(o.plan_terms.seats)],
      ['Spend', spendMeter(limits.spend, limits.budget)],
    ]), h('p', {}, h('a', { href: '#/billing' }, 'Billing'))),
    section('Settings', form({
      label: 'Organization settings',
      fields: [
        { name: 'name', label: 'Name', required: true, value: o.name },
        { name: 'data_residency.region', label: 'Data residency', type: 'select', options: ['us', 'eu', 'apac'], value: o.data_residency.region },
        { name: 'log_bodies', label: 'Keep request and response bodies in the log (after redaction)', type: 'checkbox', value: o.log_bodies },
        { name: 'require_totp', label: 'Require a second factor of every member (owners)', type: 'checkbox', value: o.require_totp },
        ...limitFields(o),
      ],
      onSubmit: (v) => {
        const n = nest(v);
        const body = { name: n.name, data_residency: n.data_residency, log_bodies: n.log_bodies, ...limitsOf(v, o) };
        if (n.require_totp !== o.require_totp) body.require_totp = n.require_totp;
        return patch('/organizations/current', body);
      },
      onDone: () => {
        announce('Organization saved.');
        reload();
      },
    })),
  ]));
}

export function members() {
  const users = pager({
    caption: 'Members',
    load: (cursor) => get('/users', { cursor }),
    columns: [
      { label: 'Name', value: (u) => u.name },
      { label: 'E-mail', value: (u) => u.email },
      { label: 'Role', value: (u) => roleControl(u) },
      { label: 'Joined', value: (u) => fmt.time(u.joined_at) },
      { label: '', value: (u) => (u.role === 'owner' ? null : danger('Remove', async () => { await del(`/users/${u.id}`); announce('Member removed.'); users.reload(); }, `Remove ${u.email}`)) },
    ],
  });
  const invites = pager({
    caption: 'Invitations',
    load: (cursor) => get('/invites', { cursor }),
    columns: [
      { label: 'E-mail', value: (i) => i.email },
      { label: 'Role', value: (i) => i.role },
      { label: 'Status', value: (i) => i.status },
      { label: 'Expires', value: (i) => fmt.time(i.expires_at) },
      { label: '', value: (i) => (i.status === 'pending' ? danger('Revoke', async () => { await del(`/invites/${i.id}`); invites.reload(); }, `Revoke the invitation of ${i.email}`) : null) },
    ],
  });
  const made = h('div');
  return page(
    'Members and invites',
    section('Members', users),
    section('Invite someone', made, form({
      label: 'Invite',
      submit: 'Send invitation',
      fields: [
        { name: 'email', label: 'E-mail', type: 'email', required: true },
        { name: 'role', label: 'Role', type: 'select', options: ROLES, value: 'member' },
        { name: 'team_ids', label: 'Team ids (comma-separated)', type: 'list' },
      ],
      onSubmit: (v) => post('/invites', v),
      onDone: (inv, el) => {
        el.reset();
        made.replaceChildren(inv.token
          ? secretBox(`Invitation link for ${inv.email}`, `${window.location.origin}/accept-invite#token=${inv.token}`, inv.warning)
          : note(`Invitation mailed to ${inv.email}.`, 'ok'));
        invites.reload();
      },
    })),
    section('Invitations', invites),
  );
}

function roleControl(u) {
  if (u.role === 'owner') return 'owner';
  // Changed only with the button: arrowing through a closed select must not change a role.
  const sel = h('select', { 'aria-label': `Role of ${u.email}` }, ROLES.map((r) => h('option', { value: r, selected: r === u.role }, r)));
  const save = btn('Save role', async () => {
    try {
      await patch(`/users/${u.id}`, { role: sel.value });
      announce(`${u.email} is now ${sel.value}.`);
    } catch (e) {
      sel.value = u.role;
      announce(`Not changed: ${e.message}`);
    }
  }, { aria: `Save the role of ${u.email}` });
  return h('span', { class: 'row' }, sel, save);
}

function teamFields(t = {}) {
  return [
    { name: 'name', label: 'Name', required: true, value: t.name },
    { name: 'description', label: 'Description', type: 'textarea', rows: 2, value: t.description, emptyAs: '' },
    ...limitFields(t),
    { name: 'models', label: 'Allowed models (comma-separated; empty: all)', type: 'list', value: (t.models || []).join(', ') },
    { name: 'default_policies', label: 'Default policies (comma-separated)', type: 'list', value: (t.default_policies || []).join(', ') },
  ];
}

function teamBody(v, cur) {
  return { name: v.name, description: v.description ?? '', models: v.models ?? null, default_policies: v.default_policies ?? [], ...limitsOf(v, cur) };
}

export function teams({ go }) {
  const list = pager({
    caption: 'Teams',
    load: (cursor) => get('/teams', { cursor }),
    columns: [
      { label: 'Name', value: (t) => h('a', { href: `#/teams/${t.id}` }, t.name) },
      { label: 'Members', value: (t) => String(t.member_count) },
      { label: 'Spend', value: (t) => spendMeter(t.spend, t.budget) },
      { label: 'Models', value: (t) => (t.models && t.models.length ? t.models.join(', ') : 'all') },
      { label: 'Default policies', value: (t) => (t.default_policies || []).join(', ') },
    ],
  });
  return page(
    'Teams',
    section('Teams', list),
    section('Create a team', form({
      label: 'Create team',
      submit: 'Create team',
      fields: teamFields(),
      onSubmit: (v) => {
        const body = teamBody(v);
        if (!body.models) delete body.models;
        if (!body.budget) delete body.budget;
        if (!body.rate_limits) delete body.rate_limits;
        if (body.description === '') delete body.description;
        return post('/teams', body);
      },
      onDone: (t) => {
        announce(`Team ${t.name} created.`);
        go(`teams/${t.id}`);
      },
    })),
  );
}

export function team({ id, go }) {
  return loaded(() => Promise.all([get(`/teams/${id}`), get(`/teams/${id}/limits`)]), ([t, limits], reload) => {
    const memberList = pager({
      caption: 'Team members',
      load: (cursor) => get(`/teams/${id}/members`, { cursor }),
      columns: [
        { label: 'Name', value: (m) => m.name },
        { label: 'E-mail', value: (m) => m.email },
        { label: 'Role in team', value: (m) => m.role },
        { label: '', value: (m) => danger('Remove', async () => { await del(`/teams/${id}/members/${m.user_id}`); memberList.reload(); }, `Remove ${m.email} from the team`) },
      ],
    });
    const add = loaded(() => get('/users', { limit: 200 }), (users) => form({
      label: 'Add member',
      inline: true,
      submit: 'Add to team',
      fields: [{ name: 'user_id', label: 'Member', type: 'select', options: users.data.map((u) => [u.id, `${u.name} <${u.email}>`]) }],
      onSubmit: (v) => post(`/teams/${id}/members/${v.user_id}`),
      onDone: () => memberList.reload(),
    }));
    return page(
      `Team ${t.name}`,
      section('Spend and limits', dl([
        ['Spend', spendMeter(limits.spend, limits.budget)],
        ['Reserved', limits.budget ? fmt.money(limits.budget.reserved_usd) : null],
        ['Remaining', limits.budget ? fmt.money(limits.budget.remaining_usd) : null],
        ['Rate limits', t.rate_limits ? `${t.rate_limits.rpm ?? '∞'} requests, ${t.rate_limits.tpm ?? '∞'} tokens per minute` : 'none'],
        ['Id', h('code', {}, t.id)],
      ])),
      section('Settings', form({
        label: 'Team settings',
        fields: teamFields(t),
        onSubmit: (v) => patch(`/teams/${id}`, teamBody(v, t)),
        onDone: () => {
          announce('Team saved.');
          reload();
        },
      })),
      section('Members', memberList, add),
      section('Delete', h('p', {}, 'A team with live API keys is deleted only together with them: tick the box to revoke them too.'),
        form({
          label: 'Delete team',
          submit: 'Delete team',
          fields: [{ name: 'revoke_keys', label: 'Also revoke the team’s API keys', type: 'checkbox', value: false }],
          onSubmit: (v) => del(`/teams/${id}${v.revoke_keys ? '?revoke_keys=true' : ''}`),
          onDone: () => {
            announce(`Team ${t.name} deleted.`);
            go('teams');
          },
        })),
    );
  });
}

export function billing() {
  return page('Billing', loaded(() => get('/organizations/current'), (o) => {
    const sub = o.subscription;
    const out = [section('Plan', dl([
      ['Plan', `${o.plan} (${o.plan_terms.name})`],
      ['Subscription', sub ? `${sub.status}${sub.cancel_at_period_end ? ', ends with the period' : ''}` : 'none'],
      ['Current period ends', sub ? fmt.time(sub.current_period_end) : null],
      ['Past due since', sub ? fmt.time(sub.past_due_since) : null],
    ]))];
    if (o.billing_mode === 'operator') {
      out.push(note('Billing is handled outside the platform on this gateway: ask its operator to change your plan.'));
    } else if (o.billing_mode === 'unconfigured') {
      out.push(note('This gateway has no billing provider configured: plans are set by its operator.'));
    } else {
      const back = `${window.location.origin}/console#/billing`;
      out.push(section('Change plan', form({
        label: 'Checkout',
        submit: 'Go to checkout',
        fields: [{ name: 'plan', label: 'Plan', type: 'select', options: ['growth', 'enterprise'] }],
        onSubmit: (v) => post('/billing/checkout', { plan: v.plan, success_url: back, cancel_url: back }),
        onDone: (p) => leaveTo(p.url),
      }), btn('Manage payment and invoices', async () => {
        try {
          const p = await post('/billing/portal', { return_url: back });
          leaveTo(p.url);
        } catch (e) {
          announce(e.message);
        }
      })));
    }
    return out;
  }));
}

export function sso() {
  const list = pager({
    caption: 'SSO connections',
    load: (cursor) => get('/sso/connections', { cursor }),
    columns: [
      { label: 'Name', value: (c) => c.name },
      { label: 'Issuer', value: (c) => c.issuer },
      { label: 'Enabled', value: (c) => (c.enabled ? 'yes' : 'no') },
      { label: 'Domains', value: (c) => h('ul', { class: 'plain' }, (c.domains || []).map((d) => h('li', {}, `${d.domain}: ${d.status} `,
        d.status !== 'verified' ? h('span', { class: 'muted' }, `(TXT ${d.txt_name} = ${d.txt_value}) `) : null,
        d.status !== 'verified' ? btn('Verify', async () => {
          try {
            const r = await post(`/sso/connections/${c.id}/domains/${encodeURIComponent(d.domain)}/verify`);
            announce(`${r.domain}: ${r.status}`);
            list.reload();
          } catch (e) {
            announce(e.message);
          }
        }) : null))) },
      { label: 'Redirect URI', value: (c) => h('code', {}, c.redirect_uri) },
      { label: '', value: (c) => danger('Delete', async () => { await del(`/sso/connections/${c.id}`); list.reload(); }, `Delete the connection ${c.name}`) },
    ],
  });
  return page('Single sign-on', note('Connections are managed by owners; the Growth plan or higher is needed.'), section('Connections', list),
    section('Add a connection', form({
      label: 'Add SSO connection',
      submit: 'Add connection',
      fields: [
        { name: 'name', label: 'Name', required: true },
        { name: 'issuer', label: 'Issuer URL', type: 'url', required: true },
        { name: 'client_id', label: 'Client id', required: true },
        { name: 'client_secret', label: 'Client secret', type: 'password', autocomplete: 'off', required: true },
        { name: 'email_domains', label: 'E-mail domains (comma-separated)', type: 'list', required: true },
        { name: 'default_role', label: 'Default role', type: 'select', options: ROLES, value: 'member' },
      ],
      onSubmit: (v) => post('/sso/connections', v),
      onDone: (_, el) => { el.reset(); list.reload(); },
    })));
}

export function audit() {
  let filters = {};
  const list = pager({
    caption: 'Admin audit events',
    load: (cursor) => get('/audit-events', { ...filters, cursor }),
    columns: [
      { label: 'When', value: (e) => fmt.time(e.created_at) },
      { label: 'Action', value: (e) => h('code', {}, e.action) },
      { label: 'Actor', value: (e) => (e.actor_user_id ? `${e.actor_user_id} (${e.actor_role || ''})` : 'system') },
      { label: 'Resource', value: (e) => `${e.resource_type} ${e.resource_id || ''}` },
      { label: 'Detail', value: (e) => h('code', { class: 'wrap' }, JSON.stringify(e.detail)) },
    ],
  });
  return page('Admin audit trail', section('Filter', form({
    label: 'Filter audit events',
    inline: true,
    submit: 'Filter',
    fields: [
      { name: 'action', label: 'Action', placeholder: 'team.update' },
      { name: 'resource_type', label: 'Resource type', placeholder: 'api_key' },
    ],
    onSubmit: async (v) => {
      filters = v;
      await list.reload();
    },
  })), section('Events', list));
}

