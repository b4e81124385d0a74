import Foundation
import Hummingbird

/// The emulator's own routes: health, statistics and runtime fault configuration, used by test, chaos
/// and benchmark scripts. They never suffer the injected latency or failures.
struct EmulatorControlController: Sendable {
    let state: EmulatorState

    /// Registers `GET /health`, `GET /emulator/stats`, `GET|POST /emulator/config` and `POST /emulator/reset`.
    func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.get("/health") { _, _ in
            Response(
                status: .ok,
                headers: [.contentType: "text/plain; charset=utf-8"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: "ok"))
            )
        }
        router.get("/emulator/stats") { _, _ in
            try JSONAnswer.response(await self.state.currentStats())
        }
        router.get("/emulator/config") { _, _ in
            try JSONAnswer.response(await self.state.currentSettings())
        }
        router.post("/emulator/config") { request, _ in
            try await self.updateConfig(request)
        }
        router.post("/emulator/reset") { _, _ in
            try JSONAnswer.response(await self.state.reset())
        }
    }

    /// Applies `{"latencyMs"?, "failRate"?, "failMode"?, "timeoutHoldMs"?}` and answers the whole current
    /// configuration; an empty body changes nothing.
    private func updateConfig(_ request: Request) async throws -> Response {
        var request = request
        let body = try await request.collectBody(upTo: 64 * 1024)
        let update: FaultSettingsUpdate
        if body.readableBytes == 0 {
            update = FaultSettingsUpdate()
        } else {
            do {
                update = try JSONDecoder().decode(FaultSettingsUpdate.self, from: Data(body.readableBytesView))
            } catch let unknown as FaultSettingsUpdate.UnknownField {
                return try JSONAnswer.response(unknown.controlError, status: .badRequest)
            } catch let illTyped as FaultSettingsUpdate.IllTypedField {
                return try JSONAnswer.response(illTyped.controlError, status: .badRequest)
            } catch {
                return try JSONAnswer.response(ControlError.malformedJSON(), status: .badRequest)
            }
        }
        switch await state.update(update) {
        case .success(let settings):
            return try JSONAnswer.response(settings)
        case .failure(let error):
            return try JSONAnswer.response(error, status: .badRequest)
        }
    }
}
