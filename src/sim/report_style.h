// The one stylesheet of gpumux's HTML reports (internal to sim): the FGD study report
// (html_report.cc) and the training-job report (dl_html_report.cc) embed it, so that the two look
// alike and a change of style is made once.
#pragma once

namespace gpumux::sim {

inline constexpr const char* kReportStyle = R"(
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       font-size: 15px; line-height: 1.5; color: #1a1a1a; background: #fff; margin: 0; }
main { max-width: 1020px; margin: 0 auto; padding: 24px 20px 40px; }
h1 { font-size: 24px; margin: 0 0 6px; font-weight: 650; }
h2 { font-size: 19px; margin: 36px 0 8px; font-weight: 650; border-top: 1px solid #ddd; padding-top: 14px; }
h3 { font-size: 16px; margin: 22px 0 6px; font-weight: 650; }
p { margin: 8px 0; }
.config { color: #444; font-size: 14px; margin: 0 0 4px; }
.config span { display: inline-block; margin-right: 14px; }
.config b { font-weight: 600; color: #222; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px;
       background: #f3f3f3; padding: 1px 4px; border-radius: 3px; word-break: break-all; }
ul.policies, ul.replay { padding-left: 20px; margin: 8px 0; }
ul.policies .dim { color: #777; font-size: 13px; }
figure { margin: 12px 0 0; }
figcaption { font-size: 14px; color: #444; margin: 4px 0 0; }
svg.chart { display: block; width: 100%; max-width: 860px; height: auto; }
svg.chart text { font-family: inherit; font-size: 13px; fill: #222; }
svg.timeline text { font-size: 11px; }
svg.chart .axis-label { font-size: 14px; font-weight: 600; }
svg.chart .note { fill: #666; }
svg.chart .value { fill: #555; }
svg.chart .grid line { stroke: #e8e8e8; stroke-width: 1; }
svg.chart .ticks line { stroke: #333; stroke-width: 1; }
svg.timeline .ticks line { stroke: #ddd; }
svg.chart .frame { fill: none; stroke: #333; stroke-width: 1; }
svg.chart .curves path { fill: none; stroke-width: 2.2; stroke-linejoin: round; stroke-linecap: round; }
svg.chart .curves path[stroke-dasharray] { stroke-linecap: butt; }
svg.chart path.study, svg.chart line.study { fill: none; stroke-width: 1.3; stroke-opacity: 0.55; }
svg.chart .diagonal { stroke: #888; stroke-width: 1.3; stroke-dasharray: 2 4; }
svg.chart .capacity { stroke: #aaa; stroke-width: 1; stroke-dasharray: 4 3; }
svg.chart .leader { stroke: #999; stroke-width: 1; stroke-dasharray: 2 2; }
svg.timeline .lanes rect { fill: #fff; }
svg.timeline .lanes rect.even { fill: #f4f5f7; }
svg.timeline .segments rect { stroke: #fff; stroke-width: 0.4; }
table { border-collapse: collapse; font-size: 14px; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 8px; border-bottom: 1px solid #e2e2e2; text-align: right; white-space: nowrap; }
th { font-weight: 600; border-bottom: 2px solid #bbb; background: #fafafa; white-space: normal;
     vertical-align: bottom; line-height: 1.3; }
th:first-child, td:first-child, td.tuner { text-align: left; }
td.seed, th.seed { text-align: right; }
td.best { font-weight: 700; }
tbody tr:hover { background: #f6f8fa; }
.scroll { overflow-x: auto; }
svg.key { display: inline-block; vertical-align: -1px; margin-right: 6px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 7px;
          vertical-align: -1px; }
.dim { color: #888; }
.sd { color: #666; font-size: 13px; }
.margin { font-weight: 600; }
.small { font-size: 13px; color: #555; margin: 4px 0; }
.classes span.item { display: inline-block; margin-right: 14px; }
details { margin: 8px 0; }
summary { cursor: pointer; font-weight: 600; }
footer { margin-top: 36px; padding-top: 10px; border-top: 1px solid #ddd; font-size: 13px; color: #666; }
a { color: #0063a6; }
)";

}  // namespace gpumux::sim
