// Webhook endpoints (signing secret shown once, rotate, test) and their deliveries with each
// attempt and a retry by hand.
import { h } from '../dom.js';
import { del, get, patch, post } from '../api.js';
import { announce, btn, danger, dl, fmt, form, loaded, note, page, pager, section, secretBox } from '../widgets.js';

export const EVENT_TYPES = [
  'budget.threshold_crossed', 'budget.exceeded', 'policy.blocked', 'api_key.created', 'api_key.revoked', 'api_key.expired',
  'provider_key.rotated', 'provider_key.revoked', 'member.added', 'member.removed', 'reconcile.discrepancy',
  'audit.chain_broken', 'billing.subscription_updated', 'usage.sync_failed', 'experiment.completed',
];

/** A new endpoint's secret, handed to its page in memory (never through the address). */
let created = null;

export function webhooks({ go }) {
  const list = pager({
    caption: 'Webhook endpoints',
    load: (cursor) => get('/organizations/current/webhooks', { cursor }),
    columns: [
      { label: 'URL', value: (w) => h('a', { href: `#/webhooks/${w.id}` }, w.url) },
      { label: 'Enabled', value: (w) => (w.enabled ? 'yes' : 'no') },
      { label: 'Events', value: (w) => w.event_types.join(', ') },
      { label: 'Description', value: (w) => w.description },
    ],
  });
  return page(
    'Webhooks',
    note('Deliveries are signed as Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) with the endpoint’s secret.'),
    section('Endpoints', list),
    section('Add an endpoint', form({
      label: 'Add webhook',
      submit: 'Add endpoint',
      fields: [
        { name: 'url', label: 'URL', type: 'url', required: true, placeholder: 'https://example.com/hooks/gw' },
        { name: 'description', label: 'Description' },
        { name: 'event_types', label: 'Events', type: 'checks', options: EVENT_TYPES, value: ['budget.exceeded', 'api_key.created'] },
      ],
      onSubmit: (v) => post('/organizations/current/webhooks', v),
      onDone: (w) => {
        announce('Endpoint added: copy its signing secret now.');
        created = { id: w.id, secret: w.secret };
        go(`webhooks/${w.id}`);
      },
    })),
  );
}

export function webhook({ id, go }) {
  const fresh = created && created.id === id ? created.secret : null;
  created = null;
  const shown = h('div', {}, fresh ? secretBox('Signing secret', fresh, 'Shown once: configure your receiver with it now.') : null);
  const deliveries = pager({
    caption: 'Deliveries, newest first',
    load: (cursor) => get('/organizations/current/webhooks/deliveries', { webhook_id: id, cursor }),
    columns: [
      { label: 'When', value: (d) => fmt.time(d.created_at) },
      { label: 'Event', value: (d) => d.event_type },
      { label: 'Status', value: (d) => d.status },
      { label: 'Attempts', value: (d) => String(d.attempts) },
      { label: 'Last answer', value: (d) => lastAttempt(d) },
      { label: 'Next attempt', value: (d) => fmt.time(d.next_attempt_at) },
      { label: '', value: (d) => (d.status === 'succeeded' ? null : btn('Retry', async () => {
        try {
          const r = await post(`/organizations/current/webhooks/deliveries/${d.id}/retry`);
          announce(`Retried: ${r.status} after ${r.attempts} attempts.`);
        } catch (e) {
          announce(e.message);
        }
        deliveries.reload();
      }, { aria: `Retry the ${d.event_type} delivery of ${fmt.time(d.created_at)}` })) },
    ],
    empty: 'No delivery yet: send a test event.',
  });
  return loaded(() => get(`/organizations/current/webhooks/${id}`), (w, reload) => page(
    `Webhook ${w.url}`,
    shown,
    dl([['Id', h('code', {}, w.id)], ['Created', fmt.time(w.created_at)], ['Old secret valid until', fmt.time(w.previous_secret_valid_until)]]),
    section('Deliveries', h('div', { class: 'row' }, btn('Send a test event', async () => {
      try {
        await post(`/organizations/current/webhooks/${id}/test`);
        announce('Test event queued.');
      } catch (e) {
        announce(e.message);
      }
      deliveries.reload();
    }, { kind: 'primary' }), btn('Refresh', () => deliveries.reload())), deliveries),
    section('Settings', form({
      label: 'Webhook settings',
      fields: [
        { name: 'url', label: 'URL', type: 'url', required: true, value: w.url },
        { name: 'description', label: 'Description', value: w.description, emptyAs: '' },
        { name: 'enabled', label: 'Enabled', type: 'checkbox', value: w.enabled },
        { name: 'event_types', label: 'Events', type: 'checks', options: EVENT_TYPES, value: w.event_types },
      ],
      onSubmit: (v) => patch(`/organizations/current/webhooks/${id}`, { ...v, event_types: v.event_types || [] }),
      onDone: () => {
        announce('Endpoint saved.');
        reload();
      },
    })),
    section('Signing secret', btn('Rotate secret', async () => {
      try {
        const r = await post(`/organizations/current/webhooks/${id}/rotate-secret`);
        shown.replaceChildren(secretBox('New signing secret', r.secret, 'The old secret keeps signing until the overlap ends.'));
      } catch (e) {
        announce(e.message);
      }
    })),
    section('Delete', danger('Delete endpoint', async () => { await del(`/organizations/current/webhooks/${id}`); go('webhooks'); })),
  ));
}

function lastAttempt(d) {
  const a = (d.attempt_history || [])[d.attempt_history.length - 1];
  if (!a) return null;
  return `${a.status_code ?? 'no answer'}${a.error ? ` (${a.error})` : ''}${a.manual ? ', by hand' : ''}`;
}


