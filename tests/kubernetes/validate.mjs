// Validate prometheus-operator objects (ServiceMonitor, PodMonitor, PrometheusRule...) against the JSON schemas
// compiled from prometheus-operator's Go types by @kubernetes-models/prometheus-operator.
//
// stdin: a JSON array of objects. stdout: a JSON array, one {kind, name, errors} per object, in order; errors is
// empty for a valid object. An object of another API group or an unknown kind is an error, never a pass.
// tests/test_kubernetes.py runs it: `node tests/kubernetes/validate.mjs < objects.json`.
import { readFileSync } from "node:fs";
import * as v1 from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const GROUP_VERSION = "monitoring.coreos.com/v1";

function check(object) {
  const kind = object?.kind;
  const name = object?.metadata?.name ?? null;
  if (object?.apiVersion !== GROUP_VERSION) {
    return { kind, name, errors: [`apiVersion ${object?.apiVersion} is not ${GROUP_VERSION}`] };
  }
  const Model = Object.hasOwn(v1, kind) ? v1[kind] : undefined;
  if (typeof Model !== "function" || Model.kind !== kind) {
    return { kind, name, errors: [`no ${GROUP_VERSION} schema for kind ${kind}`] };
  }
  try {
    new Model(object).validate();
    return { kind, name, errors: [] };
  } catch (err) {
    return { kind, name, errors: [String(err?.message ?? err)] };
  }
}

const objects = JSON.parse(readFileSync(0, "utf8"));
if (!Array.isArray(objects)) {
  throw new Error("stdin must be a JSON array of objects");
}
process.stdout.write(JSON.stringify(objects.map(check)) + "\n");
