#!/usr/bin/env python3
"""Writes one TypeScript file per dashboard that assigns its JSON to @grafana/schema's types,
for `tsc --noEmit --strict` to check (grafana/check.sh runs both).

- The whole dashboard is checked as a `Dashboard`.
- Every panel is also checked against the options and field config types of its panel plugin
  (`Panel` itself types options as a free-form record), and every query against the shape of
  a Prometheus query (the schema package has no Prometheus query type).
- String enums of the schema (ThresholdsMode, ...) are nominal in TypeScript: a JSON string is
  not assignable to them, so the types are mapped to their literal values first (`Lit`).

Usage: typecheck.py OUT_DIR DASHBOARD.json...
"""
import json
import os
import sys

# Panel plugin id -> module of @grafana/schema with its Options and FieldConfig.
PANEL_MODULES = {
    "timeseries": "timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen",
    "stat": "stat/panelcfg/x/StatPanelCfg_types.gen",
    "gauge": "gauge/panelcfg/x/GaugePanelCfg_types.gen",
    "bargauge": "bargauge/panelcfg/x/BarGaugePanelCfg_types.gen",
    "table": "table/panelcfg/x/TablePanelCfg_types.gen",
    "state-timeline": "statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen",
    "heatmap": "heatmap/panelcfg/x/HeatmapPanelCfg_types.gen",
}

# Panels with their own field config (fieldConfig.defaults.custom); the others have none.
CUSTOM_FIELD_CONFIG = {"timeseries", "table", "state-timeline", "heatmap"}

PRELUDE = """\
import type {{ AnnotationQuery, Dashboard, DataSourceRef, FieldConfigSource, Panel, RowPanel }} from "@grafana/schema";
{imports}
// JSON carries enum values as plain strings: map every string enum to its literal values.
type Lit<T> = T extends string ? `${{T}}`
  : T extends number | boolean | null | undefined ? T
  : T extends readonly (infer U)[] ? Lit<U>[]
  : T extends object ? {{ [K in keyof T]: Lit<T[K]> }}
  : T;
// A Prometheus query target as Grafana 10-12 save it.
interface PromQuery {{
  refId: string;
  datasource: DataSourceRef;
  expr: string;
  editorMode?: "code" | "builder";
  range?: boolean;
  instant?: boolean;
  format?: "time_series" | "table" | "heatmap";
  legendFormat?: string;
  interval?: string;
}}
// Prometheus annotations keep their display options beside the generic ones.
type PromAnnotation = Lit<Omit<AnnotationQuery, "target">> & {{
  target?: {{ refId: string; expr: string; interval?: string }};
  titleFormat?: string;
  textFormat?: string;
  tagKeys?: string;
  useValueForTime?: boolean;
}};
type Dash = Lit<Omit<Dashboard, "annotations">> & {{ annotations: {{ list: PromAnnotation[] }} }};
type P<O, F> = Lit<Omit<Panel, "options" | "fieldConfig" | "targets">> & {{
  options: Lit<O>;
  fieldConfig: Lit<FieldConfigSource<F>>;
  targets: PromQuery[];
  transformations?: Lit<Panel["transformations"]>;
}};
"""


def ident(kind):
    return "p_" + kind.replace("-", "_")


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    imports = "\n".join(
        f'import type * as {ident(k)} from "@grafana/schema/dist/esm/raw/composable/{m}";'
        for k, m in PANEL_MODULES.items())
    for path in paths:
        with open(path) as f:
            dash = json.load(f)
        lines = [PRELUDE.format(imports=imports),
                 f"export const dashboard: Dash = {json.dumps(dash, indent=2)};"]
        for i, panel in enumerate(dash.get("panels", [])):
            kind = panel.get("type")
            if kind == "row":
                typ = "Lit<RowPanel>"
            elif kind in PANEL_MODULES:
                custom = f"{ident(kind)}.FieldConfig" if kind in CUSTOM_FIELD_CONFIG else "{}"
                typ = f"P<{ident(kind)}.Options, {custom}>"
            else:
                sys.exit(f"{path}: panel {panel.get('title')!r}: type {kind!r} has no schema here")
            lines.append(f"// {panel.get('title')}\nexport const panel{i}: {typ} = "
                         f"{json.dumps(panel, indent=2)};")
        name = os.path.splitext(os.path.basename(path))[0].replace("-", "_") + ".ts"
        with open(os.path.join(out, name), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
