// Reads a JSON array of Kubernetes objects on stdin and validates each custom resource
// against its CRD's OpenAPI schema (as the API server would); prints one JSON result per object.
import * as certManager from "@kubernetes-models/cert-manager/cert-manager.io/v1";
import * as monitoring from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const MODELS = {
  "cert-manager.io/v1": certManager,
  "monitoring.coreos.com/v1": monitoring,
};

let input = "";
for await (const chunk of process.stdin) input += chunk;
const results = JSON.parse(input).map((doc) => {
  const model = MODELS[doc.apiVersion]?.[doc.kind];
  if (!model) return { kind: doc.kind, error: `no schema for ${doc.apiVersion} ${doc.kind}` };
  try {
    new model(doc).validate();
    return { kind: doc.kind, error: null };
  } catch (err) {
    return { kind: doc.kind, error: err.message };
  }
});
console.log(JSON.stringify(results));
process.exitCode = results.some((r) => r.error) ? 1 : 0;
