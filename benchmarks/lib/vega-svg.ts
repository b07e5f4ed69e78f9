import * as vega from 'vega'
import * as vegaLite from 'vega-lite'

/** Renders a vega-lite spec to an SVG document in Node (no browser, no canvas). */
export async function vegaLiteSvg (spec: vegaLite.TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(vegaLite.compile(spec).spec), { renderer: 'none' })
  try {
    return await view.toSVG()
  } finally {
    view.finalize()
  }
}
