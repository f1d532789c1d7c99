// Element builders. Server values only ever become text nodes or attribute values: nothing here
// parses HTML, so a team named `<script>` is shown as those characters and never runs.

const SVG = 'http://www.w3.org/2000/svg';

function apply(el, props) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) {
      // Never an inline handler attribute: the CSP forbids them, and no value may become code.
      if (typeof v !== 'function') throw new TypeError(`${k} must be a function`);
      el.addEventListener(k.slice(2), v);
    }
    else if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = String(v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = Boolean(v);
    else if (k === 'selected') el.selected = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    el.append(k instanceof Node ? k : String(k));
  }
}

/** An HTML element: `h('button', {class: 'x', onclick: f}, 'Save')`. */
export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  apply(el, props);
  append(el, kids);
  return el;
}

/** An SVG element. */
export function s(tag, props, ...kids) {
  const el = document.createElementNS(SVG, tag);
  apply(el, props);
  append(el, kids);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

let ids = 0;
/** A fresh element id, for labels and descriptions. */
export function uid(prefix = 'f') {
  ids += 1;
  return `${prefix}-${ids}`;
}
