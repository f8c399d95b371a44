// The dashboard's designed look, as checks a page can fail (app.css says what they hold to):
// every font size on a view is a step of the type scale, and what a status or a muted line says
// is readable — WCAG AA, 4.5:1 against what is really behind it — in light and dark alike.

/** The type scale of app.css (`--text-*`), in px. */
export const TYPE_SCALE = [12, 13, 14, 16, 18, 22];

/** Every run status: one colour each, told apart at a glance. */
export const RUN_STATUSES = ['pending', 'running', 'suspended', 'completed', 'failed', 'cancelled'];

/**
 * What on the page breaks the look: a font size off the scale (with the element's text), text
 * of a status, a muted line, a table header, a tag or a link in the bar under 4.5:1 against its
 * background; and, from pills of every run status laid out with the page's own stylesheet, two
 * statuses in the same colour.
 */
export async function lookProblems(page) {
  return page.evaluate(({ scale, statuses }) => {
    const problems = [];
    // A computed colour as [r, g, b, a] in 0..1: Chromium writes `rgb()`/`rgba()`, and
    // `color(srgb …)` for what `color-mix()` made.
    const parse = (text) => {
      let m = text.match(/^rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)$/);
      if (m) return [m[1] / 255, m[2] / 255, m[3] / 255, m[4] === undefined ? 1 : Number(m[4])];
      m = text.match(/^color\(srgb ([\d.e-]+) ([\d.e-]+) ([\d.e-]+)(?: \/ ([\d.]+))?\)$/);
      if (m) return [Number(m[1]), Number(m[2]), Number(m[3]), m[4] === undefined ? 1 : Number(m[4])];
      throw new Error(`a colour the check cannot read: ${text}`);
    };
    const over = (top, under) => top.slice(0, 3).map((c, i) => c * top[3] + under[i] * (1 - top[3])).concat(1);
    // What is really behind an element: its backgrounds and its ancestors', laid over each other.
    const behind = (element) => {
      const layers = [];
      for (let e = element; e; e = e.parentElement) layers.push(parse(getComputedStyle(e).backgroundColor));
      return layers.reverse().reduce((under, top) => over(top, under), [1, 1, 1, 1]);
    };
    const luminance = (rgb) => {
      const [r, g, b] = rgb.map((c) => (c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const contrast = (a, b) => {
      const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
      return (hi + 0.05) / (lo + 0.05);
    };
    const faded = (element) => {
      for (let e = element; e; e = e.parentElement) if (Number(getComputedStyle(e).opacity) < 1 || e.disabled) return true;
      return false;
    };
    const visible = (element) => element.getClientRects().length > 0 && getComputedStyle(element).visibility !== 'hidden';

    for (const element of document.querySelectorAll('body *')) {
      if (!visible(element) || ['SCRIPT', 'STYLE', 'svg', 'path', 'rect', 'line', 'g'].includes(element.tagName)) continue;
      const ownText = [...element.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
      if (!ownText && !['INPUT', 'SELECT', 'TEXTAREA', 'BUTTON'].includes(element.tagName)) continue;
      const size = parseFloat(getComputedStyle(element).fontSize);
      if (!scale.includes(size)) problems.push(`${size} px is off the type scale: <${element.tagName.toLowerCase()} class="${element.className}"> ${element.textContent.trim().slice(0, 40)}`);
    }
    const readable = '.status, .waits, .muted, th, .tag, nav a, .facts div span, .legend';
    for (const element of document.querySelectorAll(readable)) {
      if (!visible(element) || faded(element) || !element.textContent.trim()) continue;
      const fg = over(parse(getComputedStyle(element).color), behind(element));
      const ratio = contrast(fg, behind(element));
      if (ratio < 4.5) problems.push(`${ratio.toFixed(2)}:1 is under 4.5:1: <${element.tagName.toLowerCase()} class="${element.className}"> ${element.textContent.trim().slice(0, 40)}`);
    }
    // Pills of every run status, with the page's own stylesheet.
    const probe = document.createElement('div');
    document.body.append(probe);
    const colours = new Map();
    for (const name of statuses) {
      const pill = document.createElement('span');
      pill.className = `status s-${name}`;
      pill.textContent = name;
      probe.append(pill);
      const fg = parse(getComputedStyle(pill).color);
      const ratio = contrast(over(fg, behind(pill)), behind(pill));
      if (ratio < 4.5) problems.push(`the ${name} pill reads at ${ratio.toFixed(2)}:1`);
      const key = fg.slice(0, 3).map((c) => Math.round(c * 255)).join(',');
      if (colours.has(key)) problems.push(`${name} and ${colours.get(key)} have one colour (${key})`);
      colours.set(key, name);
    }
    probe.remove();
    return problems;
  }, { scale: TYPE_SCALE, statuses: RUN_STATUSES });
}
