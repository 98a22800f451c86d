// Validates Argo CD, Prometheus Operator and KEDA manifests with the kubernetes-models packages' own
// validators: each YAML document becomes its model, and model.validate() checks it against the CRD's
// schema. Usage: node validate.mjs FILE...; exit 0 when every document validates, 1 otherwise, with
// one line per document either way.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { Application } from "@kubernetes-models/argo-cd/argoproj.io/v1alpha1";
import { PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import { ScaledObject, TriggerAuthentication } from "@kubernetes-models/keda/keda.sh/v1alpha1";

const MODELS = {
  "argoproj.io/v1alpha1 Application": Application,
  "monitoring.coreos.com/v1 PrometheusRule": PrometheusRule,
  "monitoring.coreos.com/v1 ServiceMonitor": ServiceMonitor,
  "keda.sh/v1alpha1 ScaledObject": ScaledObject,
  "keda.sh/v1alpha1 TriggerAuthentication": TriggerAuthentication,
};

let failed = false;
for (const file of process.argv.slice(2)) {
  for (const document of parseAllDocuments(readFileSync(file, "utf8"))) {
    const object = document.toJS();
    const kind = `${object?.apiVersion} ${object?.kind}`;
    const Model = MODELS[kind];
    if (!Model) {
      console.log(`FAIL ${file}: no validator for ${kind}; known: ${Object.keys(MODELS).join(", ")}`);
      failed = true;
      continue;
    }
    try {
      new Model(object).validate();
      console.log(`PASS ${file}: ${kind} ${object.metadata?.name}`);
    } catch (error) {
      console.log(`FAIL ${file}: ${kind} ${object.metadata?.name}: ${error.message}`);
      failed = true;
    }
  }
}
process.exit(failed ? 1 : 0);
