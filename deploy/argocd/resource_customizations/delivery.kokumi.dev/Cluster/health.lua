-- Argo CD health of a Kokumi Cluster, from its Ready condition: Healthy when Orders can deploy to
-- it, Progressing while Kokumi has not checked it (or not its latest generation), Degraded with
-- the reason and message otherwise. Standard libraries are off in argocd-cm: base functions only.
local hs = {}
local ready = nil
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    end
  end
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "no check has reported on this Cluster yet, which Kokumi does within a minute: if it stays so, check that the Kokumi manager runs"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if ready.observedGeneration ~= nil and (observed == nil or ready.observedGeneration < observed) then
  observed = ready.observedGeneration
end
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Kokumi has not checked generation " .. tostring(generation) .. " of this Cluster yet"
  return hs
end
local message = ready.message or ""
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message
elseif ready.status == "False" and ready.reason == "RegistrationPending" then
  -- A waiting Cluster was handed a server and registers it at its next check, seconds away.
  hs.status = "Progressing"
  hs.message = (ready.reason or "") .. ": " .. message
elseif ready.status == "False" then
  hs.status = "Degraded"
  hs.message = (ready.reason or "NotReady") .. ": " .. message
else
  hs.status = "Progressing"
  hs.message = (ready.reason or "Unknown") .. ": " .. message
end
return hs
