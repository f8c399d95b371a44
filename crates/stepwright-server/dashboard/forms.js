// JSON Schema forms: a field per property, checked before anything is sent.

import { h, json } from './ui.js';

export function schemaForm(schema, initial) {
  schema = schema || {};
  const isObject = schema.type === 'object' && schema.properties;
  const fields = [];
  const root = h('div', { class: 'schema-form' });
  let counter = schemaForm.counter = (schemaForm.counter || 0) + 1;
  const add = (name, prop, value, required) => {
    const id = `f${counter}-${name || 'value'}`.replace(/[^a-zA-Z0-9_-]/g, '_');
    const errorId = `${id}-error`;
    const label = h('label', { for: id, text: `${prop.title || name || 'Value'}${required ? ' *' : ''}` });
    let input;
    let read;
    const kind = Array.isArray(prop.type) ? prop.type.find((t) => t !== 'null') : prop.type;
    if (prop.enum) {
      input = h('select', { id }, prop.enum.map((option) => h('option', { value: JSON.stringify(option), text: String(option) })));
      if (value !== undefined) input.value = JSON.stringify(value);
      read = () => JSON.parse(input.value);
    } else if (kind === 'boolean') {
      input = h('input', { id, type: 'checkbox', checked: value === true });
      read = () => input.checked;
    } else if (kind === 'integer' || kind === 'number') {
      input = h('input', { id, type: 'number', step: kind === 'integer' ? '1' : 'any', value: value ?? '' });
      read = () => (input.value.trim() === '' ? undefined : Number(input.value));
    } else if (kind === 'string') {
      const long = (prop.maxLength || 0) > 200 || prop.format === 'textarea';
      input = long ? h('textarea', { id }) : h('input', { id, type: 'text' });
      input.value = value ?? '';
      read = () => (input.value === '' && !required ? undefined : input.value);
    } else {
      input = h('textarea', { id, 'aria-describedby': `${id}-hint` });
      input.value = value === undefined ? '' : json(value);
      read = () => {
        if (input.value.trim() === '') return undefined;
        try { return JSON.parse(input.value); } catch (e) { throw new Error(`not JSON: ${e.message}`); }
      };
    }
    input.setAttribute('aria-describedby', [input.getAttribute('aria-describedby'), errorId].filter(Boolean).join(' '));
    if (required) input.setAttribute('aria-required', 'true');
    const message = h('div', { class: 'field-error', id: errorId });
    const hint = prop.description ? h('div', { class: 'muted', id: `${id}-hint`, text: prop.description }) : null;
    const wrap = h('div', { class: 'field' }, label, input, hint, message);
    root.append(wrap);
    fields.push({ name, prop, required, input, message, read });
  };
  if (isObject) {
    const required = new Set(schema.required || []);
    // The fields in the order the file declares them (the server lists it: JSON objects
    // keep none); properties it does not list follow.
    const declared = Array.isArray(schema['x-stepwright-order']) ? schema['x-stepwright-order'] : [];
    const rank = (name) => { const i = declared.indexOf(name); return i < 0 ? declared.length : i; };
    const entries = Object.entries(schema.properties).sort(([a], [b]) => rank(a) - rank(b));
    for (const [name, prop] of entries) {
      add(name, prop, initial && initial[name], required.has(name));
    }
  } else {
    add(null, schema, initial, true);
  }
  /** The value, or null after marking every field in error. */
  root.value = () => {
    let ok = true;
    const out = {};
    let single;
    for (const field of fields) {
      field.message.textContent = '';
      field.input.removeAttribute('aria-invalid');
      let value;
      try {
        value = field.read();
        const problem = checkValue(value, field.prop, field.required);
        if (problem) throw new Error(problem);
      } catch (e) {
        ok = false;
        field.message.textContent = e.message;
        field.input.setAttribute('aria-invalid', 'true');
        continue;
      }
      if (field.name === null) single = value;
      else if (value !== undefined) out[field.name] = value;
    }
    if (!ok) {
      const first = fields.find((f) => f.input.getAttribute('aria-invalid'));
      if (first) first.input.focus();
      return null;
    }
    return isObject ? out : single;
  };
  return root;
}

/** What is wrong with a value against a (flat) schema, or null. */
export function checkValue(value, schema, required) {
  if (value === undefined) return required ? 'required' : null;
  const types = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);
  if (types.length) {
    const actual = typeOf(value);
    const fits = types.some((t) => t === actual || (t === 'number' && actual === 'integer'));
    if (!fits || (typeof value === 'number' && Number.isNaN(value))) return `must be ${types.join(' or ')}`;
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) return `must be one of ${schema.enum.join(', ')}`;
  if (typeof value === 'string') {
    if (schema.minLength !== undefined && value.length < schema.minLength) return `at least ${schema.minLength} characters`;
    if (schema.maxLength !== undefined && value.length > schema.maxLength) return `at most ${schema.maxLength} characters`;
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(value)) return `must match ${schema.pattern}`;
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) return `at least ${schema.minimum}`;
    if (schema.maximum !== undefined && value > schema.maximum) return `at most ${schema.maximum}`;
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) return `at least ${schema.minItems} items`;
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return `at most ${schema.maxItems} items`;
  }
  if (schema.type === 'object' && schema.required && value && typeof value === 'object') {
    const missing = schema.required.filter((k) => !(k in value));
    if (missing.length) return `missing ${missing.join(', ')}`;
  }
  return null;
}
