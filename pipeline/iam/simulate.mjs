// Evaluates IAM requests with @cloud-copilot/iam-simulate (pinned in package.json beside the CDK CLI).
// stdin: a JSON list of simulations ({identityPolicies, resourcePolicy?, request}); stdout: a JSON list, one result each:
// {result: "Allowed" | "ImplicitlyDenied" | "ExplicitlyDenied" | "Error", errors?, closest?: {policy, sid, why}}.
import { runSimulation } from '@cloud-copilot/iam-simulate'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const simulations = JSON.parse(Buffer.concat(chunks).toString('utf8'))

// the statement that came closest to deciding: an explicit deny, or the allow whose action matched and failed least
function closest(analysis) {
  const sections = [analysis?.identityAnalysis, analysis?.resourceAnalysis].filter(Boolean)
  for (const section of sections) {
    for (const deny of section.denyStatements || []) {
      return { policy: deny.policyId || 'resource policy', sid: deny.explain?.identifier, why: 'explicit deny' }
    }
  }
  let best = null
  for (const section of sections) {
    for (const s of section.unmatchedStatements || []) {
      // the statement objects are the policy library's classes: their plain fields are in `explain`
      if (s.explain?.effect !== 'Allow' || !s.actionMatch) continue
      const misses = [s.resourceMatch ? null : 'resource', s.conditionMatch === 'Match' || s.conditionMatch === true ? null : 'condition',
        s.principalMatch === 'Match' || s.principalMatch === undefined ? null : 'principal'].filter(Boolean)
      if (!best || misses.length < best.misses.length) {
        best = { misses, policy: s.policyId || 'resource policy', sid: s.explain?.identifier,
          resources: [].concat(s.explain?.resources || []).map((r) => r.resource) }
      }
    }
  }
  if (!best) return null
  const why = best.misses.includes('resource') ? `its resources ${best.resources.join(', ')} do not match` : `${best.misses.join(' and ')} does not match`
  return { policy: best.policy, sid: best.sid, why }
}

// the statements that allowed the request: identity policy statements, then resource policy statements
function allowedBy(analysis) {
  const found = []
  for (const [section, where] of [[analysis?.identityAnalysis, 'identity'], [analysis?.resourceAnalysis, 'resource']]) {
    for (const s of section?.allowStatements || []) found.push({ policy: s.policyId || where, sid: s.explain?.identifier, where })
  }
  return found
}

const results = []
for (const simulation of simulations) {
  const response = await runSimulation({ serviceControlPolicies: [], resourceControlPolicies: [], ...simulation }, {})
  if (response.resultType === 'error') {
    results.push({ result: 'Error', errors: response.errors })
  } else if (response.resultType === 'single') {
    const analysis = response.result.analysis
    results.push({
      result: response.overallResult,
      closest: response.overallResult === 'Allowed' ? null : closest(analysis),
      allowedBy: allowedBy(analysis),
    })
  } else {  // a wildcard resource ("*" for an action with resource types): one analysis per resource pattern
    const analyses = (response.results || []).map((r) => r.analysis)
    results.push({ result: response.overallResult, closest: null, allowedBy: analyses.flatMap(allowedBy) })
  }
}
process.stdout.write(JSON.stringify(results))
